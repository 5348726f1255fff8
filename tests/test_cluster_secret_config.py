"""cluster-secret, cluster-secret-previous and cluster-secret-file: parsing, key derivation,
what CONFIG GET / REWRITE show of them, and the server failing fast on bad settings."""
import os

import psutil
import pytest

from disque.bus import secret
from disque.config import ConfigError, load_config, parse_command_line

SECRET = "secret-A-0123456789abcdef"
OTHER = "secret-B-0123456789abcdef"


@pytest.mark.unit
def test_keys_are_derived_deterministically_and_differ_per_secret():
    a1, a2, b = secret.derive_keypair(SECRET), secret.derive_keypair(SECRET), secret.derive_keypair(OTHER)
    assert (a1.public, a1.secret) == (a2.public, a2.secret)
    assert a1.public != b.public and a1.secret != b.secret
    assert len(a1.public) == 40 and len(a1.public_raw) == 32
    keys = secret.BusKeys(SECRET, OTHER)
    assert keys.serving.public == a1.public and keys.accepted == {a1.public_raw, b.public_raw}


@pytest.mark.unit
def test_secret_file_holds_one_or_two_secrets(tmp_path):
    f = tmp_path / "s"
    f.write_text("# bus secret\n%s\n" % SECRET)
    assert secret.read_secret_file(str(f)) == (SECRET, None)
    f.write_text("%s\n\n%s\n" % (OTHER, SECRET))
    assert secret.read_secret_file(str(f)) == (OTHER, SECRET)
    for bad in ("", "short\n", "%s\n%s\n%s\n" % (SECRET, OTHER, SECRET)):
        f.write_text(bad)
        with pytest.raises(secret.SecretError):
            secret.read_secret_file(str(f))
    with pytest.raises(secret.SecretError, match="No such file"):
        secret.read_secret_file(str(tmp_path / "missing"))


@pytest.mark.unit
def test_conflicting_secret_settings_are_refused(tmp_path):
    f = tmp_path / "s"
    f.write_text(SECRET + "\n" + OTHER + "\n")
    both = parse_command_line(["--cluster-secret", SECRET, "--cluster-secret-file", str(f)])
    with pytest.raises(secret.SecretError, match="both set"):
        secret.bus_keys_from_config(both)
    previous_only = parse_command_line(["--cluster-secret-previous", SECRET])
    with pytest.raises(secret.SecretError, match="needs cluster-secret"):
        secret.bus_keys_from_config(previous_only)
    twice = parse_command_line(["--cluster-secret-file", str(f), "--cluster-secret-previous", OTHER])
    with pytest.raises(secret.SecretError, match="use one"):
        secret.bus_keys_from_config(twice)
    assert secret.bus_keys_from_config(parse_command_line([])) is None
    keys = secret.bus_keys_from_config(parse_command_line(["--cluster-secret-file", str(f)]))
    assert len(keys.pairs) == 2 and keys.serving.public == secret.derive_keypair(SECRET).public


@pytest.mark.unit
def test_short_secret_is_refused_without_repeating_it():
    with pytest.raises(ConfigError) as exc:
        parse_command_line(["--cluster-secret", "tooshort"])
    assert "at least 16 characters" in str(exc.value) and "tooshort" not in exc.value.one_line


@pytest.mark.unit
def test_config_get_hides_the_secret_and_rewrite_never_writes_it(tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("port 7777\ncluster-secret-file bus.secret\n")
    cfg = load_config(str(conf), [("cluster-secret-previous", [OTHER]), ("cluster-secret", [SECRET])])
    assert dict(cfg.config_get("cluster-secret*")) == {
        "cluster-secret": "(hidden)", "cluster-secret-previous": "(hidden)",
        "cluster-secret-file": "bus.secret"}
    with pytest.raises(ConfigError, match="Unsupported CONFIG parameter"):
        cfg.config_set("cluster-secret", OTHER)
    cfg.config_set("maxclients", "99")
    text = cfg.rewritten_text()
    assert SECRET not in text and OTHER not in text
    assert "cluster-secret-file bus.secret" in text and "maxclients 99" in text
    # a secret written in the file by the operator stays as it is
    conf.write_text("cluster-secret %s\n" % SECRET)
    cfg = load_config(str(conf))
    assert cfg.rewritten_text().count("cluster-secret %s" % SECRET) == 1


@pytest.mark.server
@pytest.mark.parametrize("extra", [
    ["--cluster-secret-file", "/nonexistent/bus.secret"],
    ["--cluster-secret-previous", SECRET],
], ids=["missing file", "previous alone"])
def test_bad_secret_settings_fail_fast(start_server, extra):
    srv = start_server(extra_args=extra, wait=False)
    rc = srv.wait_exit(15)
    assert rc not in (None, 0), srv.log_tail()
    out = srv.log_text()
    assert "Traceback" not in out
    assert "cluster-secret" in out, out


@pytest.mark.server
def test_secret_from_a_file_stays_out_of_process_lists(start_server, tmp_path):
    f = tmp_path / "bus.secret"
    f.write_text(SECRET + "\n")
    os.chmod(f, 0o644)
    srv = start_server(workers=2, extra_args=["--cluster-secret-file", str(f)])
    assert srv.execute("INFO", "cluster").find(b"cluster_bus_secured:1") >= 0
    proc = psutil.Process(srv.proc.pid)
    for p in [proc] + proc.children(recursive=True):
        assert SECRET not in " ".join(p.cmdline())
    assert "may be read by other users" in srv.log_text()      # 0644: warned

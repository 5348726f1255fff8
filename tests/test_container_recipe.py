"""The container recipe (docs/container.md: docs/container/Dockerfile and compose.yaml).
There is no Docker here: the compose file is parsed with PyYAML and held to the Dockerfile,
and the Dockerfile's ENTRYPOINT is run as it is, with its ENV and a compose service's
environment (and its `command`), against the real `disque-server`: every flag it passes
must be accepted and mean what the recipe says. Only the bound ports (free loopback ones)
and the data directory (a temporary one) differ from a container."""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
import yaml

from disque.harness.ports import lease_port
from support.waits import wait_until

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "docs" / "container"
NODES = ("disque1", "disque2", "disque3")
HOST_IP = "192.0.2.10"          # what DISQUE_HOST_IP would be (documentation address)


def dockerfile():
    """[(instruction, arguments)] with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (RECIPE / "Dockerfile").read_text())
    return [tuple(line.strip().split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def instruction(name):
    return [args for ins, args in dockerfile() if ins == name]


def image_env():
    env = {}
    for args in instruction("ENV"):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def compose():
    return yaml.safe_load((RECIPE / "compose.yaml").read_text())


def substitute(value):
    """Compose's ${VAR:?message} with DISQUE_HOST_IP set."""
    return re.sub(r"\$\{DISQUE_HOST_IP(:\?[^}]*)?\}", HOST_IP, str(value))


def service_env(name):
    env = image_env()
    env.update({k: substitute(v) for k, v in compose()["services"][name]["environment"].items()})
    return env


@pytest.mark.unit
def test_the_dockerfile_builds_the_project_and_runs_disque_server():
    assert dockerfile()[0] == ("FROM", "python:3.11-slim")
    assert any("pip install" in args and " ." in args for args in instruction("RUN"))
    assert instruction("VOLUME") == ["/data"]
    env = image_env()
    assert env["DISQUE_DIR"] == "/data" and env["DISQUE_ANNOUNCE_IP"] == ""
    exposed = {int(p) for p in instruction("EXPOSE")[0].split()}
    port, links = int(env["DISQUE_PORT"]), int(env["DISQUE_JOB_LINK_PORT"])
    workers = int(env["DISQUE_WORKERS"])
    assert exposed == {port, port + 10000} | {links + w for w in range(workers)}
    entry = json.loads(instruction("ENTRYPOINT")[0])       # the exec form: signals reach it
    assert entry[:2] == ["sh", "-c"] and entry[2].startswith("exec disque-server ")
    flags = shlex.split(entry[2])
    assert flags[flags.index("--bind") + 1] == "0.0.0.0"
    for flag in ("--port", "--workers", "--dir", "--cluster-job-link-port", "--cluster-announce-ip",
                 "--cluster-announce-port", "--cluster-announce-bus-port",
                 "--cluster-announce-job-link-port"):
        value = flags[flags.index(flag) + 1]
        assert value.startswith("$DISQUE_") and value[1:] in env, (flag, value)
    assert flags[-1] == "$@"                                # compose's `command` goes after


@pytest.mark.unit
def test_the_compose_file_publishes_what_each_node_announces():
    spec = compose()
    env = image_env()
    inside = {int(env["DISQUE_PORT"]): "client", int(env["DISQUE_PORT"]) + 10000: "bus",
              int(env["DISQUE_JOB_LINK_PORT"]): "link0", int(env["DISQUE_JOB_LINK_PORT"]) + 1: "link1"}
    published = set()
    for name in NODES:
        service = spec["services"][name]
        assert service["build"]["dockerfile"] == "docs/container/Dockerfile"
        assert (RECIPE / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        assert service["volumes"] == ["%s:/data" % name] and name in spec["volumes"]
        e = service_env(name)
        assert e["DISQUE_ANNOUNCE_IP"] == HOST_IP
        told = {"client": int(e["DISQUE_ANNOUNCE_PORT"]), "bus": int(e["DISQUE_ANNOUNCE_BUS_PORT"]),
                "link0": int(e["DISQUE_ANNOUNCE_JOB_LINK_PORT"]),
                "link1": int(e["DISQUE_ANNOUNCE_JOB_LINK_PORT"]) + 1}
        mapping = dict(tuple(int(p) for p in port.split(":")) for port in service["ports"])
        assert {inside[c]: h for h, c in mapping.items()} == told, name
        published |= set(mapping)
    assert len(published) == 4 * len(NODES)               # no host port twice
    meet = spec["services"]["meet"]
    assert set(meet["depends_on"]) == set(NODES) and meet["restart"] == "no"
    script = "\n".join(meet["entrypoint"])
    for name in NODES[1:]:
        e = service_env(name)
        pair = "(%s, %s)" % (e["DISQUE_ANNOUNCE_PORT"], e["DISQUE_ANNOUNCE_BUS_PORT"])
        assert pair in script, (name, pair)                 # CLUSTER MEET to the announced address
    compile(meet["entrypoint"][-1], "meet", "exec")


def free_run(count):
    """A port where `count` consecutive ports are free, leased (lease, port)."""
    for _ in range(50):
        lease = lease_port()
        free = True
        for p in range(lease.port + 1, lease.port + count):
            s = socket.socket()
            try:
                s.bind(("0.0.0.0", p))
            except OSError:
                free = False
            finally:
                s.close()
        if free:
            return lease
        lease.release()
    raise RuntimeError("no free run of %d ports" % count)


@pytest.mark.server
@pytest.mark.parametrize("name", NODES)
def test_the_entrypoint_runs_a_node_that_announces_the_compose_addresses(name, tmp_path):
    env = service_env(name)
    told_port, told_bus = env["DISQUE_ANNOUNCE_PORT"], env["DISQUE_ANNOUNCE_BUS_PORT"]
    told_links = int(env["DISQUE_ANNOUNCE_JOB_LINK_PORT"])
    client, links = lease_port(), free_run(int(env["DISQUE_WORKERS"]))
    env.update(DISQUE_PORT=str(client.port), DISQUE_JOB_LINK_PORT=str(links.port),
               DISQUE_DIR=str(tmp_path))
    server = shutil.which("disque-server", path=os.path.dirname(sys.executable))
    assert server, "disque-server is not installed beside %s" % sys.executable
    entry = json.loads(instruction("ENTRYPOINT")[0])
    command = compose()["services"][name]["command"]
    run_env = dict(os.environ, **env, PATH=os.path.dirname(server) + os.pathsep + os.environ["PATH"])
    log = open(tmp_path / "node.log", "wb")
    proc = subprocess.Popen(entry + command, env=run_env, cwd=tmp_path, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        r = redis.Redis(port=client.port, socket_timeout=5, decode_responses=True)
        wait_until(lambda: proc.poll() is None and r.ping(), timeout=30,
                   message="the entrypoint's node did not answer: %s"
                   % (tmp_path / "node.log").read_text()[-2000:])
        config = lambda d: r.config_get(d)[d]       # noqa: E731
        assert config("cluster-announce-ip") == HOST_IP
        assert config("cluster-announce-port") == told_port
        assert config("cluster-announce-bus-port") == told_bus
        assert config("cluster-announce-job-link-port") == str(told_links)
        assert config("cluster-job-link-port") == str(links.port)
        assert config("bind") == "0.0.0.0" and config("dir") == str(tmp_path)
        assert config("appendonly") == "yes"                 # compose's `command`
        hello = r.execute_command("HELLO")
        assert hello[2][1:3] == [HOST_IP, told_port]
        line = r.execute_command("CLUSTER", "NODES").split()
        implicit = int(told_bus) == int(told_port) + 10000     # "@bus" only when it is not
        assert line[1] == "%s:%s" % (HOST_IP, told_port) + ("" if implicit else "@" + told_bus)
        info = r.info("cluster")                # redis-py reads "a,b" as a list
        assert info["cluster_job_link_ports"] == [links.port, links.port + 1]
        try:
            r.execute_command("SHUTDOWN")
        except redis.ConnectionError:
            pass
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
        client.release()
        links.release()

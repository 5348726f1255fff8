"""The Config object: values by directive, CONFIG GET / SET semantics, CONFIG REWRITE."""
from __future__ import annotations

import os
from typing import Any

from disque.config.constants import BUS_PORT_OFFSET, REWRITE_SIGNATURE
from disque.config.directives import _ATTRIBUTE_ALIASES, _TABLE, DIRECTIVES
from disque.config.errors import ConfigError
from disque.config.values import _glob_regex, split_args



class Config:
    """Typed configuration values: ``cfg.port``, ``cfg.maxmemory``, ``cfg.bind`` ... (directive
    names with ``_`` for ``-``), ``cfg.rename_commands`` and ``cfg.config_file`` (absolute path or
    None). A fresh ``Config()`` holds the defaults."""

    def __init__(self) -> None:
        values = {d.name: d.default_value() for d in _TABLE if d.has_value}
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "config_file", None)

    # ---- attribute and name access

    @staticmethod
    def _directive_name(name: str) -> str:
        name = _ATTRIBUTE_ALIASES.get(name, name)
        return name.lower().replace("_", "-")

    def __getattr__(self, attribute: str) -> Any:
        values = object.__getattribute__(self, "_values")
        name = self._directive_name(attribute)
        if name in values:
            return values[name]
        raise AttributeError(f"no config directive {attribute!r}")

    def __setattr__(self, attribute: str, value: Any) -> None:
        """Store an already-typed value (no validation): for the server's own updates."""
        if attribute == "config_file":
            object.__setattr__(self, attribute, value)
            return
        name = self._directive_name(attribute)
        if name not in self._values:
            raise AttributeError(f"no config directive {attribute!r}")
        self._values[name] = value

    def get(self, name: str) -> Any:
        """The typed value of a directive, by name (``maxmemory-policy`` or ``maxmemory_policy``)."""
        name = self._directive_name(name)
        if name not in self._values:
            raise KeyError(name)
        return self._values[name]

    @property
    def node_port(self) -> int:
        """The port that names this node (the bus is on it + 10000, HELLO and CLUSTER NODES
        announce it, the AOF files carry it): `port`, or `tls-port` on a TLS-only node."""
        return self.port or self.tls_port

    @property
    def bus_port(self) -> int:
        return self.node_port + BUS_PORT_OFFSET

    def resolve_path(self, path: str) -> str:
        """Make a relative path (logfile, pidfile, appendfilename ...) relative to ``dir``."""
        return os.path.join(self._values["dir"], path)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"Config(config_file={self.config_file!r}, port={self.port!r}, dir={self.dir!r})"

    # ---- CONFIG GET / SET

    def config_get(self, pattern: str) -> list[tuple[str, str]]:
        """CONFIG GET: (name, value) pairs of the parameters matching the glob, in table order."""
        regex = _glob_regex(pattern)
        return [
            (d.name, d.kind.show(self._values[d.name]))
            for d in _TABLE
            if d.gettable and regex.fullmatch(d.name)
        ]

    def config_set(self, name: str | bytes, value: str | bytes) -> None:
        """CONFIG SET: validate and store. Side effects (starting the AOF, evicting after a lower
        maxmemory ...) belong to the server. Raises ConfigError with the reply text sans ``ERR ``."""
        if isinstance(name, bytes):
            name = name.decode("utf-8", "surrogateescape")
        if isinstance(value, bytes):
            value = value.decode("utf-8", "surrogateescape")
        directive = DIRECTIVES.get(name.lower())
        if directive is None or not directive.settable:
            raise ConfigError(f"Unsupported CONFIG parameter: {name}")
        try:
            new_value = directive.kind.parse_set(value, self._values[directive.name])
        except ValueError:
            raise ConfigError(f"Invalid argument '{value}' for CONFIG SET '{name}'") from None
        self._values[directive.name] = new_value

    # ---- CONFIG REWRITE

    def rewrite(self) -> None:
        """CONFIG REWRITE into ``config_file``: comments, unknown lines and directives we never
        rewrite stay as they are; rewritten directives replace their first line in place and blank
        their duplicates; absent ones are appended (after a signature line) only when they differ
        from the default. The file is replaced atomically."""
        if not self.config_file:
            raise ConfigError("The server is running without a config file")
        try:
            content = self.rewritten_text()
            _write_atomically(self.config_file, content)
        except OSError as exc:
            raise ConfigError(f"Rewriting config file: {exc.strerror or exc}") from None

    def rewritten_text(self, old_text: str | None = None) -> str:
        """The content CONFIG REWRITE would write over ``old_text`` (default: the current file)."""
        if old_text is None:
            try:
                with open(self.config_file, encoding="utf-8", errors="surrogateescape") as handle:
                    old_text = handle.read()
            except FileNotFoundError:
                old_text = ""  # upstream creates the file from scratch
        raw_lines = old_text.split("\n")
        if raw_lines and raw_lines[-1] == "":
            raw_lines.pop()

        lines: list[str] = []
        line_numbers_by_name: dict[str, list[int]] = {}
        has_signature = False
        for raw_line in raw_lines:
            line = raw_line.strip(" \t\r\n")
            if not line or line.startswith("#"):
                has_signature = has_signature or line == REWRITE_SIGNATURE
                lines.append(line)
                continue
            try:
                args = split_args(line)
            except ValueError:
                lines.append("# ??? " + line)  # unparsable: keep it, as a comment
                continue
            name = args[0].lower() if args else ""
            line_numbers_by_name.setdefault(name, []).append(len(lines))
            lines.append(line)

        for directive in _TABLE:
            if not directive.rewritten:
                continue
            value = self._values[directive.name]
            arguments = directive.kind.rewrite_args(value)
            if arguments is None:
                continue  # unset string: its lines are blanked below
            new_line = f"{directive.name} {arguments}"
            old_line_numbers = line_numbers_by_name.get(directive.name)
            if old_line_numbers:
                lines[old_line_numbers.pop(0)] = new_line
            elif directive.always_rewritten or value != directive.default_value():
                if not has_signature:
                    lines.append(REWRITE_SIGNATURE)
                    has_signature = True
                lines.append(new_line)

        for name, leftover in line_numbers_by_name.items():
            directive = DIRECTIVES.get(name)
            if directive is not None and directive.rewritten:
                for number in leftover:
                    lines[number] = ""  # duplicates, or options that must now be absent

        out: list[str] = []
        previous_was_blank = False
        for line in lines:
            if not line and previous_was_blank:
                continue  # runs of blank lines become one
            previous_was_blank = not line
            out.append(line + "\n")
        return "".join(out)

    # ---- snapshots for worker processes

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable snapshot (directive name -> value, plus ``config-file``)."""
        snapshot = {d.name: d.kind.to_json(self._values[d.name]) for d in _TABLE if d.has_value}
        snapshot["config-file"] = self.config_file
        return snapshot

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Config":
        config = cls()
        for key, value in data.items():
            if key == "config-file":
                config.config_file = value
                continue
            directive = DIRECTIVES.get(key)
            if directive is None or not directive.has_value:
                raise ValueError(f"unknown config directive in snapshot: {key!r}")
            config._values[key] = directive.kind.from_json(value)
        return config


def _write_atomically(path: str, content: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    mode = None
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        pass
    import tempfile                 # CONFIG REWRITE only
    handle, temp_path = tempfile.mkstemp(prefix=".disque-conf-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="surrogateescape") as temp_file:
            temp_file.write(content)
            temp_file.flush()
            os.fsync(temp_file.fileno())
        os.chmod(temp_path, 0o644 if mode is None else mode)
        os.replace(temp_path, path)
    except BaseException:
        try:
            os.unlink(temp_path)
        except FileNotFoundError:
            pass
        raise



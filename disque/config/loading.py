"""Loading: config text, files, includes and the command line (upstream's loadServerConfigFromString)."""
from __future__ import annotations

import os
import sys
from typing import Sequence, TextIO

from disque.config.constants import _MAX_INCLUDE_DEPTH, USAGE
from disque.config.directives import DIRECTIVES
from disque.config.errors import ConfigError, ShowHelp, ShowVersion, version_text
from disque.config.kinds import _Invalid, Include, Secret
from disque.config.model import Config
from disque.config.values import quote_arg, split_args



def parse_config_text(text: str, config: Config | None = None, *, filename: str | None = None,
                      _depth: int = 0) -> Config:
    """Apply config ``text`` on ``config`` (a fresh default Config if None) and return it.

    ``filename`` is only used to name an included file in ``ConfigError.one_line``.
    """
    config = Config() if config is None else config
    for line_number, raw_line in enumerate(text.split("\n"), start=1):
        line = raw_line.strip(" \t\r\n")
        if not line or line.startswith("#"):
            continue
        try:
            _apply_line(config, line, filename=filename, depth=_depth)
        except _Invalid as exc:
            raise ConfigError(str(exc), line_number=line_number, line=_redacted(line),
                              filename=filename) from None
    return config


def _redacted(line: str) -> str:
    """A config line fit for an error message: a secret's value is not repeated."""
    name = line.split(None, 1)[0].lower()
    directive = DIRECTIVES.get(name)
    if directive is not None and isinstance(directive.kind, Secret):
        return f"{name} {Secret.HIDDEN}"
    return line


def _apply_line(config: Config, line: str, *, filename: str | None, depth: int) -> None:
    """Apply one non-comment config line; a refused line raises _Invalid(fatal message)."""
    try:
        args = split_args(line)
    except ValueError:
        raise _Invalid("Unbalanced quotes in configuration line") from None
    if not args:
        return
    name, arguments = args[0].lower(), args[1:]
    directive = DIRECTIVES.get(name)
    if directive is None or not directive.in_file or not directive.kind.accepts(len(arguments)):
        raise _Invalid("Bad directive or wrong number of arguments")
    if isinstance(directive.kind, Include):
        if depth >= _MAX_INCLUDE_DEPTH:
            raise _Invalid("Too many nested includes (include loop?)")
        _load_file(config, arguments[0], filename=arguments[0], depth=depth + 1)
        return
    config._values[name] = directive.kind.parse(arguments, config._values[name])


def _read_config_file(path: str, *, base_dir: str, stdin: TextIO | None = None) -> str:
    if path == "-":
        return (stdin or sys.stdin).read()
    try:
        with open(os.path.join(base_dir, path), encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except OSError:
        raise ConfigError(f"Fatal error, can't open config file '{path}'") from None


def _load_file(config: Config, path: str, *, filename: str, depth: int) -> None:
    # Upstream opens includes relative to its working directory, which `dir` has changed.
    text = _read_config_file(path, base_dir=config.dir)
    parse_config_text(text, config, filename=filename, _depth=depth)


def options_text(options: Sequence[tuple[str, Sequence[str]]]) -> str:
    """The config lines for ``--name value ...`` options (values quoted, as upstream does)."""
    return "\n".join(
        " ".join([name] + [quote_arg(value) for value in values]) for name, values in options
    )


def load_config(
    config_file: str | None = None,
    options: Sequence[tuple[str, Sequence[str]]] = (),
    *,
    stdin: TextIO | None = None,
) -> Config:
    """Load ``config_file`` (``-`` = stdin, None = defaults only) then apply ``options``
    ``[(directive, [args...]), ...]`` as if appended to the file (they win)."""
    config = Config()
    text = ""
    if config_file is not None:
        text = _read_config_file(config_file, base_dir=os.getcwd(), stdin=stdin)
        config.config_file = None if config_file == "-" else os.path.abspath(config_file)
    if options:
        text += "\n" + options_text(options)  # line numbers go on counting after the file's
    return parse_config_text(text, config)


def _looks_like_config_file(word: str) -> bool:
    """Whether a word after a variable-length option (bind) is rather the config file."""
    return word == "-" or "/" in word or word.endswith(".conf") or os.path.isfile(word)


def _option_values(argv: Sequence[str], position: int, name: str, *,
                   expecting_config_file: bool) -> tuple[list[str], int]:
    """The values of option ``--name`` starting at ``argv[position]``, and the next position."""
    directive = DIRECTIVES.get(name.lower())
    max_args = directive.kind.max_args if directive is not None else None
    values: list[str] = []
    while position < len(argv) and not argv[position].startswith("--"):
        word = argv[position]
        if max_args is not None and len(values) >= max_args:
            break
        if max_args is None and values and expecting_config_file and _looks_like_config_file(word):
            break  # e.g. `--bind 127.0.0.1 disque.conf`: the file is not an address
        position += 1
        if max_args is not None and max_args > 1 and not values and len(word.split()) > 1:
            return word.split(), position  # `--client-output-buffer-limit "normal 0 0 0"`
        values.append(word)
    return values, position


def parse_command_line(argv: Sequence[str], *, stdin: TextIO | None = None) -> Config:
    """``disque-server [config-file] [--directive value ...]`` (argv without the program name).

    The config file may stand before or after the options. An option takes as many words as its
    directive has arguments; ``bind`` and unknown names take words up to the next ``--`` or up to
    a word that looks like a config file (``-``, contains ``/``, ends in ``.conf`` or is an
    existing file). A single quoted word is split when a directive needs
    several (``--client-output-buffer-limit "normal 0 0 0"``). Raises ShowHelp / ShowVersion
    for -h / -v, ConfigError otherwise.
    """
    config_file: str | None = None
    options: list[tuple[str, list[str]]] = []
    position = 0
    while position < len(argv):
        word = argv[position]
        position += 1
        if word in ("-h", "--help"):
            raise ShowHelp(USAGE)
        if word in ("-v", "--version"):
            raise ShowVersion(version_text())
        if word.startswith("--"):
            name = word[2:]
            values, position = _option_values(argv, position, name, expecting_config_file=config_file is None)
            options.append((name, values))
        elif config_file is None:
            config_file = word
        elif options:
            options[-1][1].append(word)  # a surplus argument: report it on its option's line
        else:
            raise ConfigError(f"Unexpected argument '{word}': only one config file may be given")
    return load_config(config_file, options, stdin=stdin)

"""Configuration: the directive table, the config file / command line parser, CONFIG GET/SET/REWRITE.

The package, one concern per module: `constants` (limits, version, usage), `errors`,
`values` (parsing helpers other modules share), `kinds` (how a directive's arguments are
parsed and printed), `directives` (the table), `model` (the Config object, CONFIG GET / SET /
REWRITE), `loading` (config text, files, includes, the command line). Everything other
modules use is importable from `disque.config` itself.

Everything the server can be configured with is described once, in ``DIRECTIVES`` (SPEC section
13 plus our own ``workers``, ``stats-log-file``, ``stats-log-interval``, ``metrics-port`` and
``metrics-auth``). Each row says how the arguments are parsed and validated, the default, whether
CONFIG GET / CONFIG SET may touch it and whether CONFIG REWRITE writes it; the row order is the
CONFIG REWRITE order (and CONFIG GET's).

The parser follows upstream's ``loadServerConfigFromString``: one directive per line, ``#``
comments, shell-like quoting, case-insensitive names, last occurrence wins, and command-line
``--name value ...`` options appended after the file text. Errors raise ``ConfigError`` whose
``str()`` is upstream's fatal message.

Deliberate differences from upstream:
* ``dir`` does not chdir at parse time: it stores an absolute path (checked to be a searchable
  directory); relative paths (``include``, ``dir``, and for the server: ``logfile``,
  ``appendfilename`` ...) are meant relative to it, see ``Config.resolve_path``.
* ``bind`` defaults to 127.0.0.1 instead of every interface.
* Numbers are validated strictly (upstream's ``atoi`` turns garbage into 0).
* An empty ``requirepass`` / ``unixsocket`` means "none", as with CONFIG SET.
* ``rename-command`` is only recorded (``Config.rename_commands``); the server applies it, in order.
"""
from __future__ import annotations

# the public names of the package, re-exported (importers use `from disque.config import X`)
from disque.config.constants import (  # noqa: F401
    BUS_PORT_OFFSET, DISQUE_VERSION, MAX_BIND_ADDRESSES, MAX_PASSWORD_LENGTH, MAX_PORT,
    MIN_SECRET_LENGTH, REWRITE_SIGNATURE, USAGE,
)
from disque.config.errors import (  # noqa: F401
    CommandLineExit, ConfigError, ShowHelp, ShowVersion, version_text,
)
from disque.config.values import (  # noqa: F401
    format_memory, glob_match, human_bytes, parse_integer, parse_memory, parse_yes_no,
    quote_arg, split_args,
)
from disque.config.kinds import (  # noqa: F401
    AddressList, Bool, ClientOutputBufferLimit, CommandRenames, Directory, Enum, Include,
    Integer, KeepaliveInteger, Kind, Memory, Octal, OutputBufferLimits, Secret, String,
)
from disque.config.directives import (  # noqa: F401
    Directive, DIRECTIVES,
)
from disque.config.model import (  # noqa: F401
    Config,
)
from disque.config.loading import (  # noqa: F401
    load_config, options_text, parse_command_line, parse_config_text,
)

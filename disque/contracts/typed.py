"""Named message types: one per message kind of a boundary, with one encoder and one decoder
(docs/design.md, "Contracts between processes").

A message type is a typing.NamedTuple of its fields, decorated with `@message(KIND)`. Its
wire form is the msgpack list [KIND, *fields] (or [*fields] for `@message(None)`: the reply
entries keyed by their request id), the same lists the links carried before they had names.

- `Type.encode(*fields)` -> that list: a plain list build, so a sender makes no object of the
  type (the links send thousands of messages per second);
- `Type.decode(msg)` -> the named tuple, ValueError for a list of another kind or length.

Cython cores on the per-command path build the same lists inline, with the kinds read from
these modules at import; tests/test_messages.py holds both to the encoders.
"""


def message(kind):
    def typed(cls):
        n = len(cls._fields)
        make = tuple.__new__

        if kind is None:
            def encode(*fields):
                if len(fields) != n:
                    raise TypeError("%s takes %d fields, not %d" % (cls.__name__, n, len(fields)))
                return list(fields)

            def decode(msg):
                if type(msg) is not list or len(msg) != n:
                    raise ValueError("not a %s: %r" % (cls.__name__, msg))
                return make(cls, msg)
        else:
            def encode(*fields):
                if len(fields) != n:
                    raise TypeError("%s takes %d fields, not %d" % (cls.__name__, n, len(fields)))
                return [kind, *fields]

            def decode(msg):
                if type(msg) is not list or len(msg) != n + 1 or msg[0] != kind:
                    raise ValueError("not a %s: %r" % (cls.__name__, msg))
                return make(cls, msg[1:])
        cls.KIND = kind
        cls.encode = staticmethod(encode)
        cls.decode = staticmethod(decode)
        return cls
    return typed


def by_kind(*types):
    """{KIND: type} for a boundary's types (each kind once)."""
    table = {t.KIND: t for t in types}
    assert len(table) == len(types), "a kind named twice"
    return table

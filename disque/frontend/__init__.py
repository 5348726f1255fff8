"""The front-end process as parts (docs/design.md, "Front-end parts"); `Frontend` is its root."""
from disque.frontend.node import Frontend

__all__ = ["Frontend"]

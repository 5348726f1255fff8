"""Test support code shared by the test files (markers today; fixtures move here next)."""

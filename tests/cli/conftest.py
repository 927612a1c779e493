"""The CLI tests share the compare tests' shop (a recorded parent and its forks)."""

from tests.compare.conftest import shop as shop  # the fixture

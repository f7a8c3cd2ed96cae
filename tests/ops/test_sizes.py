"""hlo_tools.ops.sizes: the one byte-size parser and the one byte formatter."""

import pytest

from hlo_tools.ops.sizes import format_bytes, parse_size


@pytest.mark.parametrize(
  "text,expected",
  [
    ("4096", 4096),
    ("4K", 4 * 1024),
    ("64M", 64 * 1024 * 1024),
    ("1G", 1024**3),
    ("4KB", 4096),
    ("4KiB", 4096),
    ("4kib", 4096),
    ("4096B", 4096),
    (" 2m ", 2 * 1024 * 1024),
    ("1", 1),
  ],
)
def test_sizes_are_powers_of_1024(text, expected):
  assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "1.5K", "-1", "4T", "4 K", "0x10", "4iB"])
def test_a_malformed_size_is_a_value_error(text):
  with pytest.raises(ValueError, match=r"expected N, NK, NM or NG"):
    parse_size(text)


def test_a_size_of_no_bytes_is_refused():
  for text in ("0", "0K", "0B"):
    with pytest.raises(ValueError, match="must be at least 1 byte"):
      parse_size(text)


def test_format_bytes_uses_one_decimal_of_the_largest_unit():
  assert format_bytes(None) == "-"
  assert format_bytes(0) == "0 B"
  assert format_bytes(1023) == "1023 B"
  assert format_bytes(1024) == "1.0 KiB"
  assert format_bytes(1536) == "1.5 KiB"
  assert format_bytes(65536) == "64.0 KiB"
  assert format_bytes(16 << 20) == "16.0 MiB"
  assert format_bytes(3 * 1024**3) == "3.0 GiB"
  assert format_bytes(-2048) == "-2.0 KiB"
  # TiB is the largest unit: larger sizes stay in it.
  assert format_bytes(1024**5) == "1024.0 TiB"


def test_precise_format_drops_trailing_zeros():
  assert format_bytes(1024, precise=True) == "1 KiB"
  assert format_bytes(1536, precise=True) == "1.5 KiB"
  assert format_bytes(100, precise=True) == "100 B"
  # 1234567 B = 1.17737... MiB: four significant digits.
  assert format_bytes(1234567, precise=True) == "1.177 MiB"

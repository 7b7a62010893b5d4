"""Unit tests of protocols/workq/values.py against the Go semantics the reference workq uses.

The reference parses numbers with Go's strconv (ParseUint, ParseInt, Atoi), ids with
satori/go.uuid's FromString then workq's ValidateID (not nil, version 4, RFC 4122 variant), and
times with time.Parse("2006-01-02T15:04:05Z", s). Each case below states what Go answers; the
functions return None exactly where Go returns an error.
"""
from __future__ import annotations

import calendar

import pytest

from protocols.workq.values import (MAX_NAME, atoi, canonical, format_time, is_v4, parse_int,
                                    parse_time, parse_uint, parse_uuid, valid_name)


# ================================================================== strconv.ParseUint
@pytest.mark.parametrize("text,bits,want", [
    (b"0", 32, 0),
    (b"1000", 32, 1000),
    (b"007", 32, 7),                       # leading zeros are fine in base 10
    (b"0000000000000000000000001", 8, 1),  # however many
    (b"4294967295", 32, 2**32 - 1),
    (b"4294967296", 32, None),             # range error
    (b"255", 8, 255),
    (b"256", 8, None),
    (b"18446744073709551615", 64, 2**64 - 1),
    (b"18446744073709551616", 64, None),
    (b"99999999999999999999999999", 64, None),
    (b"", 32, None),                       # empty: syntax error
    (b"+1", 32, None),                     # ParseUint takes no sign
    (b"-1", 32, None),
    (b"-0", 32, None),
    (b"1.0", 32, None),
    (b"1e3", 32, None),
    (b"0x10", 32, None),                   # prefixes only with base 0
    (b"1_000", 32, None),                  # underscores only with base 0
    (b" 1", 32, None),
    (b"1 ", 32, None),
    (b"1\n", 32, None),
    (b"\xd9\xa1", 32, None),               # a non-ASCII digit (Arabic-Indic one)
])
def test_parse_uint(text, bits, want):
    """Go strconv.ParseUint(s, 10, bits)."""
    assert parse_uint(text, bits) == want


# =================================================================== strconv.ParseInt
@pytest.mark.parametrize("text,bits,want", [
    (b"0", 32, 0),
    (b"-0", 32, 0),
    (b"+0", 32, 0),
    (b"+7", 32, 7),
    (b"-5", 32, -5),
    (b"007", 32, 7),
    (b"-007", 32, -7),
    (b"2147483647", 32, 2**31 - 1),
    (b"2147483648", 32, None),
    (b"-2147483648", 32, -(2**31)),
    (b"-2147483649", 32, None),
    (b"9223372036854775807", 64, 2**63 - 1),
    (b"9223372036854775808", 64, None),
    (b"-9223372036854775808", 64, -(2**63)),
    (b"-9223372036854775809", 64, None),
    (b"", 32, None),
    (b"+", 32, None),
    (b"-", 32, None),
    (b"--1", 32, None),
    (b"+-1", 32, None),
    (b"1-", 32, None),
    (b" -1", 32, None),
    (b"7=9", 32, None),
    (b"abc", 32, None),
    (b"0x1f", 32, None),
])
def test_parse_int(text, bits, want):
    """Go strconv.ParseInt(s, 10, bits)."""
    assert parse_int(text, bits) == want


@pytest.mark.parametrize("text,want", [
    (b"4", 4), (b"-1", -1), (b"+3", 3), (b"0004", 4), (b"1048577", 1048577),
    (b"9223372036854775807", 2**63 - 1), (b"9223372036854775808", None),
    (b"-9223372036854775808", -(2**63)), (b"", None), (b"x", None), (b"4 ", None),
    (b"+", None), (b"-", None), (b"\t4", None),
])
def test_atoi(text, want):
    """Go strconv.Atoi on a 64-bit platform (payload and result sizes)."""
    assert atoi(text) == want


# ======================================================================== uuid forms
V4 = "11111111-1111-4111-8111-000000000003"
V4_BYTES = bytes.fromhex(V4.replace("-", ""))


@pytest.mark.parametrize("text", [
    V4.encode(),                                         # canonical
    V4.upper().encode(),                                 # upper case
    b"{" + V4.encode() + b"}",                           # braced
    b"urn:uuid:" + V4.encode(),                          # urn
    V4.replace("-", "").encode(),                        # 32 hex digits ("hash-like")
    V4.replace("-", "").upper().encode(),
    b"urn:uuid:" + V4.replace("-", "").encode(),         # urn + 32 hex (length 41)
    b"{" + V4.upper().encode() + b"}",
])
def test_uuid_forms_accepted(text):
    """satori/go.uuid FromString: canonical, braced (38), urn (45 or 41), 32 hex; any case."""
    assert parse_uuid(text) == V4_BYTES


@pytest.mark.parametrize("text", [
    b"",
    b"not-a-uuid",
    V4.encode()[:-1],                                    # 35 characters
    V4.encode() + b"0",                                  # 37 characters
    b"11111111-1111-4111-8111-00000000000g",             # a non-hex digit
    b"111111111-111-4111-8111-000000000003",             # a dash in the wrong place
    b"11111111_1111_4111_8111_000000000003",             # not dashes
    b"11111111-1111-4111-8111+000000000003",
    b"{" + V4.replace("-", "").encode() + b"}",          # braces around 32 hex: length 34
    b"(" + V4.encode() + b")",                           # not braces
    b"{" + V4.encode() + b"]",
    b"URN:UUID:" + V4.encode(),                          # the urn prefix is case-sensitive
    b"urn:uuid:{" + V4.encode()[:-2] + b"}",             # 45 characters, braces inside
    b"urn:uuid:" + V4.encode()[:-1] + b"-",
    b"uri:uuid:" + V4.encode(),
    b" " + V4.encode()[1:],
    b"11111111-1111-4111-8111-0000000000 3",
    b"0x111111111141118111000000000003",                 # 32 characters, not all hex
    b"11111111111141118111000000000003\n",
])
def test_uuid_forms_refused(text):
    """Anything else is an error (-CLIENT-ERROR Invalid ID)."""
    assert parse_uuid(text) is None


def test_canonical_is_lower_case_8_4_4_4_12():
    """The id replies and lookups use: lower case, dashed (as the golden transcript shows for
    an upper-case id)."""
    u = parse_uuid(b"ABCDEF01-2345-4678-9ABC-DEF012345678")
    assert canonical(u) == "abcdef01-2345-4678-9abc-def012345678"
    assert canonical(bytes(16)) == "00000000-0000-0000-0000-000000000000"
    assert canonical(parse_uuid(b"{" + V4.encode() + b"}")) == V4


# ========================================================================= v4 check
@pytest.mark.parametrize("text,want", [
    (V4, True),
    ("abcdef01-2345-4678-9abc-def012345678", True),      # variant 0b10 with 9 (1001)
    ("11111111-1111-4111-a111-000000000000", True),
    ("11111111-1111-4111-b111-000000000000", True),
    ("00000000-0000-0000-0000-000000000000", False),     # nil
    ("6ba7b810-9dad-11d1-80b4-00c04fd430c4", False),     # the spec's example id: version 1
    ("11111111-1111-3111-8111-000000000001", False),     # version 3
    ("11111111-1111-5111-8111-000000000001", False),     # version 5
    ("11111111-1111-0111-8111-000000000001", False),     # version 0
    ("11111111-1111-f111-8111-000000000001", False),     # version 15
    ("11111111-1111-4111-0111-000000000001", False),     # NCS variant (0xxx)
    ("11111111-1111-4111-7111-000000000001", False),
    ("11111111-1111-4111-c111-000000000001", False),     # Microsoft variant (110x)
    ("11111111-1111-4111-e111-000000000001", False),     # future variant (111x)
    ("00000000-0000-4000-8000-000000000000", True),      # not nil: version and variant set
    ("6a6f6267-6174-4000-8000-000000000002", True),      # jobgate's derived uids are v4
])
def test_is_v4(text, want):
    """workq ValidateID: not nil, version 4, RFC 4122 variant (satori's Variant())."""
    assert is_v4(parse_uuid(text.encode())) is want


# ============================================================================ names
@pytest.mark.parametrize("name,want", [
    (b"ping", True), (b"a", True), (b"A-Z_a.z-0.9", True), (b"...", True), (b"-", True),
    (b"a" * MAX_NAME, True), (b"a" * (MAX_NAME + 1), False), (b"", False),
    (b"bad!name", False), (b"a b", False), (b"a/b", False), (b"a\n", False), (b"a:b", False),
    (b"caf\xc3\xa9", False), (b"a+b", False),
])
def test_valid_name(name, want):
    """workq ValidateName: 1-255 bytes of [a-zA-Z0-9_.-]."""
    assert valid_name(name) is want


# ============================================================================= times
def ms(y, mo, d, h=0, mi=0, s=0, frac=0) -> int:
    """Wall ms of a UTC date."""
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) * 1000 + frac


@pytest.mark.parametrize("text,want", [
    (b"2026-11-22T02:42:48Z", ms(2026, 11, 22, 2, 42, 48)),
    (b"2016-06-14T06:46:46Z", ms(2016, 6, 14, 6, 46, 46)),
    (b"2030-01-01T00:00:00.5Z", ms(2030, 1, 1, frac=500)),       # a fraction Go accepts
    (b"2030-01-01T00:00:00.123456789Z", ms(2030, 1, 1, frac=123)),
    (b"2030-01-01T00:00:00.0001Z", ms(2030, 1, 1)),
    (b"2030-01-01T00:00:00.9999999999999Z", ms(2030, 1, 1, frac=999)),
    (b"2030-01-01T00:00:00,25Z", ms(2030, 1, 1, frac=250)),       # comma (Go >= 1.17)
    (b"2030-01-01T7:05:09Z", ms(2030, 1, 1, 7, 5, 9)),           # one-digit hour ("15")
    (b"2030-01-01T23:59:59Z", ms(2030, 1, 1, 23, 59, 59)),
    (b"2028-02-29T12:00:00Z", ms(2028, 2, 29, 12)),              # leap year
    (b"2000-02-29T00:00:00Z", ms(2000, 2, 29)),                  # divisible by 400
    (b"2030-12-31T00:00:00Z", ms(2030, 12, 31)),
    (b"1970-01-01T00:00:00Z", 0),
    (b"0001-01-01T00:00:00Z", ms(1, 1, 1)),
])
def test_parse_time_accepted(text, want):
    """Go time.Parse("2006-01-02T15:04:05Z", s) -> wall ms (a fraction kept to the ms)."""
    assert parse_time(text) == want


@pytest.mark.parametrize("text", [
    b"",
    b"2027-02-29T00:00:00Z",           # not a leap year
    b"2100-02-29T00:00:00Z",           # divisible by 100, not by 400
    b"2030-04-31T00:00:00Z",           # April has 30 days
    b"2030-02-30T00:00:00Z",
    b"2030-13-01T00:00:00Z",
    b"2030-00-01T00:00:00Z",
    b"2030-01-00T00:00:00Z",
    b"2030-01-32T00:00:00Z",
    b"2030-01-01T24:00:00Z",
    b"2030-01-01T00:60:00Z",
    b"2030-01-01T00:00:60Z",           # no leap second
    b"2030-01-01T00:00:00+00:00",      # an explicit offset (the golden's "bad time format")
    b"2030-01-01T00:00:00-07:00",
    b"2030-01-01T00:00:00+0000",
    b"2030-01-01T00:00:00",            # no Z
    b"2030-01-01T00:00:00z",           # lower-case z
    b"2030-01-01T00:00:00ZZ",
    b"2030-01-01T00:00:00Z\n",
    b"2030-01-01 00:00:00Z",
    b"2030-01-01t00:00:00Z",
    b"2030-1-01T00:00:00Z",            # month and day take two digits ("01", "02")
    b"2030-01-1T00:00:00Z",
    b"2030-01-01T00:0:00Z",
    b"2030-01-01T00:00:0Z",
    b"2030-01-01T001:00:00Z",          # hour: at most two digits
    b"30-01-01T00:00:00Z",             # four-digit year
    b"+2030-01-01T00:00:00Z",
    b"20300-01-01T00:00:00Z",
    b"2030-01-01T00:00:00.Z",          # a separator with no digit
    b"2030-01-01T00:00:00.5",
    b"2030-01-01T00:00:00 Z",
    b" 2030-01-01T00:00:00Z",
    b"2030-01-01T00:00:00.5.5Z",
])
def test_parse_time_refused(text):
    """Whatever Go's time.Parse refuses with this layout (-CLIENT-ERROR Invalid Time)."""
    assert parse_time(text) is None


def test_parse_time_year_zero_refused():
    """Go parses year 0000; values.parse_time refuses it on purpose (documented: no date
    before year 1 can be in the future, so `schedule` answers Invalid Time either way)."""
    assert parse_time(b"0000-01-01T00:00:00Z") is None


@pytest.mark.parametrize("wall_ms,text", [
    (0, "1970-01-01T00:00:00Z"),
    (ms(2026, 11, 22, 2, 42, 21), "2026-11-22T02:42:21Z"),
    (ms(2026, 11, 22, 2, 42, 21, 999), "2026-11-22T02:42:21Z"),   # whole seconds, truncated
    (ms(2028, 2, 29, 23, 59, 59, 500), "2028-02-29T23:59:59Z"),
])
def test_format_time(wall_ms, text):
    """Times in replies: UTC, whole seconds, the layout they are parsed with."""
    assert format_time(wall_ms) == text
    assert parse_time(text.encode()) == wall_ms - wall_ms % 1000

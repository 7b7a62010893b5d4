"""The compact job record (core/records.py, issue 14: memory per job): the rarely set fields
live in a side object made only when one of them gets a non-default value."""
from __future__ import annotations

from core.records import MORE_FIELDS, Job, JobMore


def test_more_defaults_match_the_declared_ones():
    x = JobMore()
    assert [(n, getattr(x, n)) for n, _ in MORE_FIELDS] == list(MORE_FIELDS)


def test_side_object_only_once_a_field_is_not_its_default():
    j = Job(1, "q", b"x", 0, 60000, 0, 1, "beanstalk")
    for name, default in MORE_FIELDS:
        assert getattr(j, name) == default
        setattr(j, name, default)          # writing a default makes nothing
    assert j.more is None and not j.finished
    j.fails += 1
    assert j.more is not None and j.fails == 1 and j.more.fails == 1
    j.result = b"done"
    assert j.finished and j.result_ok is False


def test_a_plain_job_is_smaller_than_before():
    """19 slots instead of 32 (the record used to be 304 bytes with its GC header)."""
    import sys
    j = Job(1, "q", b"x", 0, 60000, 0, 1, "beanstalk")
    assert not hasattr(j, "__dict__")
    assert sys.getsizeof(j) <= 16 + 19 * 8 + 16

"""Durations in words (portal.durations): what is shown reads back to the same seconds."""

import pytest

from portal.durations import duration_parse, duration_words


@pytest.mark.parametrize("seconds,words", [(604800, "7 days"), (86400, "1 day"), (5400, "90 minutes"),
                                           (3600, "1 hour"), (90, "90 seconds"), (1.5, "1.5 seconds"),
                                           (31536000, "365 days")])
def test_words_name_the_largest_exact_unit_and_read_back(seconds, words):
    assert duration_words(seconds) == words
    assert duration_parse(words) == seconds


def test_it_reads_short_units_and_bare_seconds_and_names_what_it_takes():
    assert duration_parse("7d") == duration_parse("1 week") == 604800
    assert duration_parse(" 36 H ") == 129600 and duration_parse("604800") == 604800
    assert duration_parse("-1") == -1  # parsed: the range is the caller's rule (and named by it)
    for bad in ("", "a week", "7 fortnights", "1e999 days", "1" + "0" * 400 + " days"):
        with pytest.raises(ValueError, match="such as 7 days"):
            duration_parse(bad)

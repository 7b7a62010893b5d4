"""Tables in docs/ that are generated from the code stay equal to it."""
from __future__ import annotations

import os

from core.transitions import markdown

from .support import ROOT


def test_mapping_md_holds_the_transition_table_of_the_code():
    text = open(os.path.join(ROOT, "docs", "mapping.md"), encoding="utf-8").read()
    begin, end = "<!-- transitions:begin -->\n", "\n<!-- transitions:end -->"
    assert begin in text and end in text, "docs/mapping.md lost its transition table markers"
    in_docs = text[text.index(begin) + len(begin):text.index(end)]
    assert in_docs == markdown(), ("docs/mapping.md's transition table differs from "
                                   "core/transitions.py: paste core.transitions.markdown()")

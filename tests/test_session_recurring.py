"""What the heartbeat may promote and what counts as one statement: pure rules, no model."""

from __future__ import annotations

import numpy as np

from memoryd.services.session.recurring import recurring, same_statement, statements

LOG = """# 2026-03-01

## Memory flush 14:05 (session main)

- user: The deploy window for the web app is Tuesday at 14:00 UTC, agreed with ops.
- [ ] 09:30 - Ask Priya Natarajan to review the quarterly roadmap draft before Friday.
- 好的
- token = abcdef0123456789 is what the staging bot uses for the billing service
"""


def test_statements_keep_the_text_without_bullets_speakers_or_times_and_drop_the_rest() -> None:
    found = statements("memory/2026-03-01.md", "2026-03-01", LOG, others=[], min_chars=50)
    assert [(s.line, s.text) for s in found] == [
        (5, "The deploy window for the web app is Tuesday at 14:00 UTC, agreed with ops."),
        (6, "Ask Priya Natarajan to review the quarterly roadmap draft before Friday."),
    ]


def test_a_conflicting_number_or_name_makes_two_statements_and_more_detail_does_not() -> None:
    a = "The deploy window for the web app is Tuesday at 14:00 UTC."
    assert not same_statement(a, a.replace("14:00", "16:00"), 0.99, similarity=0.75, overlap=0.3)
    assert not same_statement("Debugged the export job with Bob all afternoon today.",
                              "Debugged the export job with Carol all afternoon today.", 0.99,
                              similarity=0.75, overlap=0.3)
    assert same_statement(a, a.rstrip(".") + ", agreed with ops.", 0.95, similarity=0.75, overlap=0.3)
    assert same_statement("Never delete mails from the inbox.", "Never deleting mail from the inbox!", 0.9,
                          similarity=0.75, overlap=0.3)  # stems: mails/mail, delete/deleting
    assert not same_statement(a, a, 0.5, similarity=0.75, overlap=0.3)  # the embedding test first


def test_only_lines_of_different_days_group_and_a_group_needs_min_days() -> None:
    text = "- The staging cluster is rebuilt every Sunday night, keep no test data there.\n"
    one = statements("memory/2026-03-01.md", "2026-03-01", text * 2, others=[], min_chars=50)
    two = statements("memory/2026-03-02.md", "2026-03-02", text, others=[], min_chars=50)
    same_day = recurring(one, np.ones((2, 1), np.float32), similarity=0.75, overlap=0.3, min_days=2)
    assert same_day == []
    [group] = recurring(one + two, np.ones((3, 1), np.float32), similarity=0.75, overlap=0.3, min_days=2)
    assert group.days == ["2026-03-01", "2026-03-02"]
    assert [(s.path, s.line) for s in group.per_day()] == [("memory/2026-03-01.md", 1), ("memory/2026-03-02.md", 1)]

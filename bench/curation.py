"""Memory that curates itself, measured: heartbeat proposals and supersession in search, as JSON.

    python bench/curation.py [--seed N] [--no-locomo] [--workdir DIR]

- ``proposals``: a generated month of daily logs (30 days) holding known recurring facts (each
  said in other words on 2–4 days close together), near-misses (one template with other names
  and numbers every day), one-off events, and known noise that must never be promoted
  (heartbeat lines, ``NO_REPLY``, tool output, secrets, short lines, another agent's lines),
  and statements whose value changed the next day (never one proposal).
  One heartbeat a day with the real code (MiniLM, the extractive phrasing, the ledger).
  precision = proposals whose sources are all lines of one fact / proposals; recall = facts
  proposed / facts; ``noisePromoted`` = proposals holding any noise line (goal 0).
- ``supersession``: 40 statements whose value changed between an older and a newer daily log
  (eight wordings: an owner, an on-call person, a region, a go-live date, a team taking over, a
  report format, an escalation contact, a pinned version; two facts of each of 20 subjects) and
  8 whose value was only restated (8 other subjects), indexed in-process with the local model; one question per
  statement through ``QueryService.search``. ``newerFirst`` = share of answers holding both
  lines where the newer ranks above the older, with supersession off (before) and on (after);
  ``restatedMarked`` = answers about a restated value that mark anything superseded (goal 0).
- ``locomo``: R@6 of the temporal questions (category 2) of ../shared/locomo-dev, supersession
  off and on, how many of their answers hold a result marked ``supersededBy``, and R@1 of all
  its scored questions (bench/locomo.py) (read from there, never copied; see its README for the scoring rule).
- ``cost``: what supersession adds to a search where it has the most to compare: 80 daily logs of
  60 short statements each, from 8 templates over 12 subjects and 12 names (every line a
  statement with values, every result ~25 of them), the ``hash`` provider so that no model's
  time hides it; 200 questions about those subjects, each asked with supersession off and on
  (alternating which goes first); p50 and mean ms of each, and how many answers hold a mark.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # tests/inline_index.py indexes in-process

from inline_index import index_now  # noqa: E402
from locomo import SCORED  # noqa: E402

from memoryd.services.query.engine import QueryService  # noqa: E402
from memoryd.services.query.models import SearchRequest, dump  # noqa: E402
from memoryd.services.session.heartbeat import Heartbeat  # noqa: E402
from memoryd.shared.config.loader import load_settings  # noqa: E402
from memoryd.shared.runtime.bus import Bus  # noqa: E402

LOCOMO = REPO.parent / "shared" / "locomo-dev"
START = date(2026, 3, 1)
DAYS = 30
FACTS = [
    ["The billing service is owned by team-alpha and Dana Reyes is its on-call lead.",
     "Dana Reyes leads on-call for the billing service, which team-alpha owns.",
     "Reminder: team-alpha owns billing; Dana Reyes is the on-call lead there."],
    ["Always ask before deleting anything from the shared support inbox, even obvious spam.",
     "Never delete mail in the shared support inbox without asking first, spam included.",
     "Rule again: ask me before you delete anything from the shared support inbox."],
    ["The user prefers answers in short bullet points rather than long paragraphs of prose.",
     "Keep answers to short bullet points; the user dislikes long paragraphs of prose.",
     "User asked again for short bullet-point answers instead of long prose paragraphs."],
    ["Run `make lint` before pushing any branch, because CI rejects unformatted code.",
     "CI rejected the push again: always run `make lint` before pushing a branch.",
     "Before any push run `make lint`; the CI pipeline rejects code that is not formatted."],
    ["Invoices for the Hamburg office go to accounting-hh@example.com, not the main address.",
     "Send Hamburg office invoices to accounting-hh@example.com rather than the main mailbox.",
     "Hamburg invoices: use accounting-hh@example.com, never the main accounting address."],
    ["The weekly sync with Priya Natarajan moved to Thursdays at 15:00 Berlin time.",
     "Weekly sync with Priya Natarajan is now on Thursdays, 15:00 Berlin time.",
     "Reminder that the Priya Natarajan weekly sync happens Thursdays at 15:00 Berlin time."],
    ["The staging cluster is rebuilt every Sunday night, so do not leave test data there.",
     "Staging gets rebuilt each Sunday night; never keep test data on the staging cluster.",
     "Do not store test data on staging: the cluster is rebuilt every Sunday night."],
    ["Marco is allergic to peanuts, so team lunch orders must avoid anything with peanuts.",
     "Team lunch orders must not contain peanuts because Marco is allergic to them.",
     "Ordered lunch without peanuts again since Marco has a peanut allergy."],
    ["Use the gh CLI with the --repo flag for the mono repository, the default remote is wrong.",
     "The gh CLI needs --repo for the mono repository because its default remote is wrong.",
     "Again had to pass --repo to the gh CLI for the mono repository; the default remote is wrong."],
    ["Quarterly reports are due to the board on the first Monday after the quarter ends.",
     "Board quarterly reports are due the first Monday after each quarter closes.",
     "The quarterly board report deadline is the first Monday after the quarter ends."],
    ["The user writes German with clients and English with the engineering team.",
     "With clients the user writes in German, with the engineering team in English.",
     "Client emails are in German; anything for the engineering team is in English."],
    ["Backups of the photo archive go to the NAS in the basement, never to the cloud drive.",
     "The photo archive is backed up to the basement NAS only, never to the cloud drive.",
     "Photo archive backups: basement NAS, not the cloud drive, as agreed before."],
]
#: One subject with a new value on the next day: two statements, never one proposal.
CHANGED = [
    ("The release freeze for the payments team starts on Friday at 18:00 this month.",
     "The release freeze for the payments team starts on Monday at 09:00 this month."),
    ("The offsite with the whole design team is planned in Lisbon for the second week of May.",
     "The offsite with the whole design team is planned in Porto for the second week of May."),
    ("Our cloud budget for the analytics cluster is capped at 4000 euros per month.",
     "Our cloud budget for the analytics cluster is capped at 6500 euros per month."),
]
NAMES = ["Bob", "Carol", "Eve", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj", "Olivia", "Peggy"]
TOPICS = ["the login flow", "the export job", "the search latency", "the onboarding email", "the invoice PDF",
          "the mobile layout", "the audit log", "the rate limiter", "the billing webhook", "the CSV import"]
NOISE = [
    "- HEARTBEAT_OK: nothing needs attention right now, every scheduled check came back green",
    "- NO_REPLY",
    "```\n$ kubectl get pods --namespace billing-production --output wide\n"
    "billing-api-7d9f   1/1   Running   0   3d   app=billing-api,tier=backend\n```",
    "- [tool result: exec] deployed billing-api to production in 42 seconds without any errors",
    "- The staging database password: hunter2-very-secret-value for the billing service account",
    "- The OpenAI key for the bots is sk-proj4a8b9c0d1e2f3g4h5i6j7k8l9m0n and must rotate monthly",
    "- ok, sounds good, thanks a lot",
    "- lunch, then back to it",
    "- [work]: the tax checklist for the quarterly filing is kept in the shared finance folder",
    "## Notes from agent work\n- The work agent keeps the quarterly tax filing checklist in its shared folder.",
]


def month(workspace: Path, rng: random.Random) -> tuple[dict[str, int], set[str], list[int]]:
    """Write the month; → {fact line: fact id}, the noise lines, the fact ids that recur."""
    days: dict[int, list[str]] = {d: [] for d in range(DAYS)}
    fact_of: dict[str, int] = {}
    for fid, variants in enumerate(FACTS):
        first = rng.randrange(0, DAYS - 3)
        count = rng.choice([2, 2, 3, 4])
        chosen = sorted(rng.sample(range(first, first + 3), min(count, 3)) if count <= 3
                        else [first, first + 1, first + 2, min(first + 5, DAYS - 1)])
        for n, day in enumerate(chosen):
            line = variants[n % len(variants)]
            days[day].append(f"- {line}")
            fact_of[line] = fid
    for n, (before, after) in enumerate(CHANGED):
        day = 5 + 8 * n
        days[day].append(f"- {before}")
        days[day + 1].append(f"- {after}")
    noise: set[str] = set()
    for day in range(DAYS):
        # One topic a day in turn: a name can come back within days, a (name, topic) pair cannot.
        name, topic = rng.choice(NAMES), TOPICS[day % len(TOPICS)]
        days[day].append(f"- Standup: reviewed ticket ABC-{100 + day} with {name} about {topic} and next steps.")
        days[day].append(f"- Deployed build 1.{day}.{rng.randrange(10)} of the web app to staging for {name}.")
        days[day].append(f"- Spent the afternoon with {name} debugging {topic}; found the cause in a config flag.")
        for block in rng.sample(NOISE, 5):
            days[day].append(block)
            noise.update(x.lstrip("- ").strip() for x in block.splitlines())
        rng.shuffle(days[day])
        # A section runs to the next heading: another agent's section is the day's last.
        days[day].sort(key=lambda x: x.startswith("## "))
        (workspace / "memory" / f"{START + timedelta(days=day)}.md").write_text(
            f"# {START + timedelta(days=day)}\n\n" + "\n".join(days[day]) + "\n", encoding="utf-8")
    return fact_of, noise, sorted(set(fact_of.values()))


def proposals(work: Path, seed: int) -> dict[str, Any]:
    workspace = work / "curation"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "HEARTBEAT.md").write_text("- Look for what repeats.\n", encoding="utf-8")
    fact_of, noise, facts = month(workspace, random.Random(seed))
    config = work / "curation.json"
    config.write_text(json.dumps({"agents": {"list": [{"id": "main", "workspace": str(workspace)},
                                                      {"id": "work", "workspace": str(work / "work-ws")}]},
                                  "memoryd": {"stateDir": str(work / "state-curation")}}), encoding="utf-8")
    settings = load_settings(config, state_dir=work / "state-curation")
    # A heartbeat's run touches Redis not at all (only tick claims slots there): an unconnected client.
    bus = Bus(redis.Redis(host="127.0.0.1", port=1), settings)
    beat = Heartbeat(settings, bus)
    made = []
    for day in range(DAYS):
        made += beat.run("main", START + timedelta(days=day))["proposed"]
    right, noisy, seen = 0, 0, set()
    for p in made:
        texts = _source_texts(workspace, p["sources"])
        ids = {fact_of.get(t) for t in texts}
        noisy += any(t in noise for t in texts)
        # Right: every source is a line of one fact, proposed for the first time for that layer.
        layer = (fact_of.get(texts[0]), p["target"] == "MEMORY.md")
        if len(ids) == 1 and None not in ids and layer not in seen:
            right += 1
            seen.add(layer)
    found = {fact_of.get(t) for p in made for t in _source_texts(workspace, p["sources"])} - {None}
    return {"days": DAYS, "facts": len(facts), "proposals": len(made),
            "precision": round(right / len(made), 3) if made else None,
            "recall": round(len(found) / len(facts), 3), "noisePromoted": noisy,
            "targets": {t: sum(p["target"] == t for p in made) for t in ("MEMORY.md", "SOUL.md", "TOOLS.md")}}


def _source_texts(workspace: Path, sources: list[str]) -> list[str]:
    out = []
    for source in sources:
        path, _, line = source.rpartition(":")
        out.append((workspace / path).read_text(encoding="utf-8").splitlines()[int(line) - 1].lstrip("- ").strip())
    return out


SUBJECTS = ["billing service", "payments API", "search cluster", "mobile app", "data warehouse", "auth gateway",
            "mail relay", "CI runners", "status page", "design system", "export service", "image resizer",
            "feature flags", "audit pipeline", "chat widget", "docs site", "VPN", "backup job", "CRM sync",
            "invoice generator"]
RESTATED_SUBJECTS = ["wiki", "build cache", "SSO bridge", "metrics stack", "print server", "release train",
                     "sandbox", "billing portal"]
TEAMS = ["alpha", "bravo", "delta", "echo", "foxtrot", "gamma", "kilo", "lima", "omega", "zeta", "sigma", "tango"]


#: How a value is first stated and then changed, and the question asked: (older, newer, question).
#: Eight wordings of a change as people log one: a verb of change or none, a key and a colon, a
#: new value after "from", a date, a format, a person, a version.
CHANGES = [
    ("The owner of the {s} is team-{old}.", "The {s} owner changed to team-{new}.", "Who owns the {s}?"),
    ("{S} on-call: {old_name}", "{S} on-call is now {new_name}.", "Who is on call for the {s}?"),
    ("The {s} runs in region eu-{old}-1.", "The {s} region moved to eu-{new}-1 after the migration.",
     "Which region does the {s} run in?"),
    ("{S} go-live is planned for March {day}.", "{S} go-live slipped to April {day2}, the vendor is late.",
     "When does the {s} go live?"),
    ("Team-{old} maintains the {s}.", "Team-{new} took over the {s} from team-{old} today.",
     "Which team maintains the {s}?"),
    ("{old_name} wants the {s} report as a PDF every Monday.",
     "{old_name} asked for the {s} report as a CSV export instead, still on Mondays.",
     "In what format does {old_name} want the {s} report?"),
    ("Escalations for the {s} go to {old_name}.", "From now on {s} escalations go to {new_name}.",
     "Who handles escalations for the {s}?"),
    ("The {s} is pinned to version 2.{day}.", "Bumped the {s} pin to version 3.{day2} today.",
     "Which version is the {s} pinned to?"),
]
#: Restated, not changed: the same value again, which must never be marked.
RESTATED = [
    ("The {s} owner is team-{old}.", "Checked again: the {s} owner is team-{old}.", "Who owns the {s}?"),
    ("{S} on-call: {old_name}", "Confirmed {old_name} is still on call for the {s} this week.",
     "Who is on call for the {s}?"),
]


def supersession(work: Path, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    workspace = work / "supersede"
    (workspace / "memory").mkdir(parents=True)
    days: dict[int, list[str]] = {d: [f"- Spent time with {rng.choice(NAMES)} on {rng.choice(TOPICS)}."]
                                  for d in range(DAYS)}
    truth, restated = [], []
    #: two facts of each subject, of two kinds (a question about one is not about the other; the owner and
    #: the team that maintains it are one fact); restated ones on subjects of their own
    cases = [(SUBJECTS[n % len(SUBJECTS)], CHANGES[(n + n // len(SUBJECTS)) % len(CHANGES)], truth)
             for n in range(2 * len(SUBJECTS))]
    cases += [(subject, RESTATED[n % 2], restated) for n, subject in enumerate(RESTATED_SUBJECTS)]
    for subject, (before, after, question), into in cases:
        old, new = rng.sample(TEAMS, 2)
        old_name, new_name = rng.sample(NAMES, 2)
        fill = {"s": subject, "S": subject[0].upper() + subject[1:], "old": old, "new": new,
                "old_name": old_name, "new_name": new_name, "day": rng.randrange(1, 28), "day2": rng.randrange(1, 28)}
        a = rng.randrange(0, DAYS - 10)
        b = rng.randrange(a + 3, DAYS)
        days[a].append("- " + before.format(**fill))
        days[b].append("- " + after.format(**fill))
        into.append((question.format(**fill), f"memory/{START + timedelta(days=a)}.md",
                     f"memory/{START + timedelta(days=b)}.md"))
    for day, lines in days.items():
        (workspace / "memory" / f"{START + timedelta(days=day)}.md").write_text(
            f"# {START + timedelta(days=day)}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    out = {}
    for on in (False, True):
        settings = _settings(work, "supersede", workspace, on)
        index_now(settings, "main")
        service = QueryService(settings)
        both = newer = marked = wrong = 0
        try:
            for question, older, newest in truth + restated:
                answer = dump(service.search("main", SearchRequest(query=question)))
                paths = [r["path"] for r in answer["results"]]
                if (question, older, newest) in restated:
                    wrong += any("supersededBy" in r for r in answer["results"])
                elif older in paths and newest in paths:
                    both += 1
                    newer += paths.index(newest) < paths.index(older)
                    marked += "supersededBy" in answer["results"][paths.index(older)]
        finally:
            service.close()
        out["after" if on else "before"] = {"questions": len(truth), "bothFound": both,
                                            "newerFirst": round(newer / both, 3) if both else None,
                                            "olderMarked": marked, "restated": len(restated),
                                            "restatedMarked": wrong}
    return out


COST_TEMPLATES = ["- The {s} on-call is {n}", "- {n} owns the {s} now", "- The {s} moved to region eu-{k}",
                  "- The {s} deadline is 2026-04-{d:02d}", "- {n} reviewed the {s} at {h}:00",
                  "- The {s} version is 2.{k}", "- Asked {n} about the {s} budget of {k}00 euros",
                  "- The {s} standup is at {h}:30 with {n}"]
COST_ASKED = ["deadline", "version", "region", "standup", "owner"]


def cost(work: Path, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    workspace = work / "cost"
    (workspace / "memory").mkdir(parents=True)
    subjects = SUBJECTS[:12]
    for n in range(80):
        day = START + timedelta(days=n)
        lines = [rng.choice(COST_TEMPLATES).format(s=rng.choice(subjects), n=rng.choice(NAMES), k=rng.randint(1, 9),
                                                   d=rng.randint(1, 28), h=rng.randint(8, 17)) for _ in range(60)]
        (workspace / "memory" / f"{day}.md").write_text(f"# {day}\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    questions = [f"who is the {rng.choice(subjects)} on-call now" if n % 3 == 0
                 else f"what is the {rng.choice(subjects)} {rng.choice(COST_ASKED)}" for n in range(200)]
    settings = {on: _settings(work, "cost", workspace, on, provider="hash") for on in (False, True)}
    index_now(settings[False], "main")  # one index (one state dir) for both
    services = {on: QueryService(s) for on, s in settings.items()}
    ms: dict[bool, list[float]] = {False: [], True: []}
    marked = 0
    try:
        for question in questions[:20]:  # warm both
            for service in services.values():
                service.search("main", SearchRequest(query=question))
        for n, question in enumerate(questions):
            for on in ((False, True) if n % 2 else (True, False)):
                started = time.perf_counter()
                answer = dump(services[on].search("main", SearchRequest(query=question)))
                ms[on].append((time.perf_counter() - started) * 1000)
                marked += on and any("supersededBy" in r for r in answer["results"])
    finally:
        for service in services.values():
            service.close()
    return {"questions": len(questions), "answersMarked": marked,
            **{f"{'on' if on else 'off'}{k}": round(f(ms[on]), 2) for on in (False, True)
               for k, f in (("P50Ms", statistics.median), ("MeanMs", statistics.mean))}}


def _settings(work: Path, name: str, workspace: Path, supersede: bool, provider: str = "local") -> Any:
    config = work / f"{name}-{supersede}.json"
    search = {"provider": provider, "query": {"supersede": supersede}}
    config.write_text(json.dumps({"agents": {"defaults": {"memorySearch": search},
                                             "list": [{"id": "main", "workspace": str(workspace)}]},
                                  "memoryd": {"stateDir": str(work / f"state-{name}")}}), encoding="utf-8")
    return load_settings(config, state_dir=work / f"state-{name}")


def locomo(work: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for on in (False, True):
        hits = total = marked = first = asked = 0
        for conv in sorted(LOCOMO.glob("conv-*")):
            settings = _settings(work, f"locomo-{conv.name}", conv, on)
            index_now(settings, "main")
            service = QueryService(settings)
            try:
                for raw in (conv / "qrels.jsonl").read_text(encoding="utf-8").splitlines():
                    q = json.loads(raw)
                    if q["category"] not in SCORED or not q["evidence"]:
                        continue
                    results = dump(service.search("main", SearchRequest(query=q["question"])))["results"]
                    found = [any(r["path"] == e["path"] and r["startLine"] <= e["line"] <= r["endLine"]
                                 for e in q["evidence"]) for r in results]
                    asked += 1
                    first += bool(found) and found[0]
                    if q["category"] == 2:
                        total += 1
                        hits += any(found)
                        marked += any("supersededBy" in r for r in results)
            finally:
                service.close()
        out["after" if on else "before"] = {"questions": total, "R@6": round(hits / total, 3) if total else None,
                                            "answersWithSupersededBy": marked,
                                            "allQuestions": asked, "allR@1": round(first / asked, 3) if asked else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-locomo", action="store_true", help="skip the LoCoMo temporal R@6")
    parser.add_argument("--workdir", type=Path, help="keep the generated workspaces and indexes here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        started = datetime.now()
        result: dict[str, Any] = {"proposals": proposals(work, args.seed),
                                  "supersession": supersession(work, args.seed), "cost": cost(work, args.seed)}
        if not args.no_locomo and LOCOMO.is_dir():
            result["locomo"] = locomo(work)
        result["seconds"] = round((datetime.now() - started).total_seconds(), 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

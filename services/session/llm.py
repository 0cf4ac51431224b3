"""The session service's LLM: flush notes, compaction summaries, session notes, merged heartbeat notes.

With ``memoryd.llm.baseUrl`` set, chat completions go through the ``openai`` package to
that OpenAI-compatible endpoint. Without it, :class:`Extractive` stands in: it keeps, word
for word, the lines that carry decisions, preferences, rules, dates, names and todos.

What the extractive fallback cannot do: it never rephrases, merges or infers (a rule
spread over two lines, or implied without a keyword, is missed); its keywords are English
and Chinese only; names are found by capitalisation, so lower-case names are missed and
some capitalised phrases are kept needlessly; it cannot tell a stated rule from a quoted
one; its session-note slug is always the ``HHMM`` fallback; and a heartbeat's merged note is the
newest occurrence word for word, not a sentence joining what the occurrences add.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from memoryd.services.session.transcript import Message
from memoryd.shared import defaults as d
from memoryd.shared.config.settings import LlmSettings
from memoryd.shared.embed.openai_errors import provider_error

NO_REPLY = "NO_REPLY"

COMPACTION_PROMPT = (
    "You compact a long conversation between a user and an AI agent. Write a concise summary that "
    "keeps every decision, preference, rule or constraint the user stated (word for word), open "
    "questions and todos, names, dates, file paths and identifiers, and what is being worked on now. "
    "Drop chit-chat and raw tool output. Reply with the summary only."
)
NOTE_PROMPT = (
    "The conversation below has ended. Write a short descriptive Markdown note of what it was about: "
    "decisions, preferences, rules, facts worth remembering, open todos. On the FIRST line write "
    "'SLUG: ' and a 1-4 word lowercase hyphenated slug for the topic (e.g. 'SLUG: api-design'), "
    "then the note."
)
MERGE_PROMPT = (
    "These lines were written on different days of an AI agent's daily log and say the same thing. "
    "Write it once, as one short sentence for the agent's long-term memory: keep names, dates, "
    "numbers and identifiers exactly, and where the lines differ keep what the newest (last) says. "
    "Reply with the sentence only."
)

_KEEP = re.compile(
    r"\b(always|never|must|mustn't|should|shouldn't|don't|do not|remember|rule|confirm\w*|"
    r"decid\w*|decision|agreed?|chose|choose|going with|prefer\w*|favou?rite|like to|want|"
    r"todo|to-do|to do|need to|deadline|due|remind\w*|follow up|next step|plan\w*|"
    r"today|tomorrow|yesterday|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"my name|named|called|contact|email)\b"
    r"|TODO|FIXME|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b|@\w+"
    r"|必须|不要|不能|永远|禁止|决定|喜欢|偏好|记住|规则|待办|确认|截止",
    re.IGNORECASE,
)
#: Two capitalised words in a row mid-sentence: a name, a product, a place.
_NAME = re.compile(r"(?<=[a-z,;:]\s)[A-Z][a-z]+\s+[A-Z][a-z]+\b")


class Llm(Protocol):
    name: str

    def flush(self, system: str, turns: list[Message], prompt: str) -> str: ...

    def summarise(self, turns: list[Message], previous: str | None, focus: str | None) -> str: ...

    def note(self, turns: list[Message]) -> tuple[str | None, str]: ...

    def merge(self, lines: list[str]) -> str: ...


def make_llm(settings: LlmSettings) -> Llm:
    if settings.base_url:
        return OpenAIChat(settings)
    return Extractive()


def text_of(m: Message) -> str:
    """A message's text for a summariser: tool output cut short, tool calls spelled out."""
    if m.role == "tool":
        text = m.content if len(m.content) <= d.LLM_TOOL_QUOTE_CHARS else m.content[:d.LLM_TOOL_QUOTE_CHARS] + " ..."
        return f"[tool result{': ' + m.name if m.name else ''}] {text}"
    return m.content + "".join(f" [calls {c.name}({c.arguments})]" for c in m.tool_calls or [])


def render(turns: list[Message]) -> str:
    return "\n".join(text_of(m) if m.role == "tool" else f"{m.role}: {text_of(m)}" for m in turns)


def parse_note(reply: str) -> tuple[str | None, str]:
    """A ``SLUG: x`` first line → (slug, rest); otherwise (None, reply)."""
    first, _, rest = reply.strip().partition("\n")
    match = re.match(r"^\s*\**slug\**\s*:\s*(.+?)\s*$", first, re.IGNORECASE)
    if match:
        return match.group(1), rest.strip()
    return None, reply.strip()


class OpenAIChat:
    """Chat completions against any OpenAI-compatible ``base_url``."""

    def __init__(self, settings: LlmSettings) -> None:
        import openai

        self.settings = settings
        self.name = f"openai-compatible:{settings.model}"
        self._openai = openai
        key = settings.api_key.get_secret_value() if settings.api_key else "not-needed"
        self.client = openai.OpenAI(base_url=settings.base_url, api_key=key, timeout=settings.timeout_seconds,
                                    max_retries=2)

    def _chat(self, messages: list[dict[str, Any]]) -> str:
        oa = self._openai
        try:
            response = self.client.chat.completions.create(model=self.settings.model, messages=messages)  # type: ignore[arg-type]
        except oa.OpenAIError as exc:
            raise provider_error(self.name, exc, oa) from exc
        return (response.choices[0].message.content or "").strip()

    def flush(self, system: str, turns: list[Message], prompt: str) -> str:
        """One silent turn: the conversation so far, then the flush prompt."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        # Tool results are folded into text: the silent turn has no tool loop to pair them with.
        messages += [{"role": "user" if m.role == "tool" else m.role, "content": text_of(m)} for m in turns]
        messages.append({"role": "user", "content": prompt})
        return self._chat(messages)

    def summarise(self, turns: list[Message], previous: str | None, focus: str | None) -> str:
        system = COMPACTION_PROMPT + (f"\nFocus: {focus}" if focus else "")
        body = (f"Summary so far:\n{previous}\n\n" if previous else "") + "Conversation:\n" + render(turns)
        return self._chat([{"role": "system", "content": system}, {"role": "user", "content": body}])

    def note(self, turns: list[Message]) -> tuple[str | None, str]:
        reply = self._chat([{"role": "system", "content": NOTE_PROMPT},
                            {"role": "user", "content": "Conversation:\n" + render(turns)}])
        return parse_note(reply)

    def merge(self, lines: list[str]) -> str:
        """One sentence for a statement seen on several days (``lines``: oldest first)."""
        body = "\n".join(f"{n}. {line}" for n, line in enumerate(lines, start=1))
        return self._chat([{"role": "system", "content": MERGE_PROMPT}, {"role": "user", "content": body}])


class Extractive:
    """The offline stand-in: keeps the lines that carry something durable, verbatim."""

    name = "extractive"

    @staticmethod
    def keep(turns: list[Message], *, with_role: bool) -> list[str]:
        found: dict[str, None] = {}
        for m in turns:
            if m.role == "tool":
                continue
            for raw in m.content.splitlines():
                line = raw.strip().lstrip("-*• ").strip()
                if not line or not (_KEEP.search(line) or _NAME.search(line)):
                    continue
                line = line if len(line) <= d.LLM_MAX_LINE_CHARS else line[:d.LLM_MAX_LINE_CHARS] + " ..."
                found[f"- {m.role}: {line}" if with_role else f"- {line}"] = None
        return list(found)

    def flush(self, system: str, turns: list[Message], prompt: str) -> str:
        lines = self.keep([m for m in turns if m.role == "user"], with_role=False)
        return "\n".join(lines) if lines else NO_REPLY

    def summarise(self, turns: list[Message], previous: str | None, focus: str | None) -> str:
        parts = [previous.strip()] if previous else []
        lines = self.keep(turns, with_role=True)
        users = [m for m in turns if m.role == "user"]
        header = f"Extractive summary of {len(turns)} earlier messages (no LLM configured)"
        parts.append(header + (f"; focus: {focus}" if focus else "") + ":")
        parts.extend(lines or ["- (no decisions, rules, dates or todos stated)"])
        if users:
            last = users[-1].content.strip().splitlines()[0][:d.LLM_MAX_LINE_CHARS] if users[-1].content.strip() else ""
            parts.append(f"- last user request: {last}")
        return "\n".join(parts)

    def note(self, turns: list[Message]) -> tuple[str | None, str]:
        lines = self.keep(turns, with_role=True)
        topic = next((m.content.strip().splitlines()[0] for m in turns if m.role == "user" and m.content.strip()),
                     "")
        body = [f"Topic: {topic[:d.LLM_MAX_LINE_CHARS]}" if topic else "Topic: (none stated)", ""]
        body += lines or ["- (nothing durable was stated)"]
        return None, "\n".join(body)

    def merge(self, lines: list[str]) -> str:
        """The newest wording, verbatim: it carries the newest value when the lines differ."""
        return lines[-1].strip()

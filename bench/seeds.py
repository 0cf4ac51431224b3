"""seeds: the five Chinese articles behind the project (``../shared/seeds``), asked in Chinese.

Read by bench/retrieval.py (``--seeds DIR``; read there, never copied into the repository).
The articles are long paragraphs of Chinese about OpenClaw's memory; each becomes one memory
file of one agent's workspace (``memory/seed-N.md``), indexed with the default settings through
the real pipeline code (``index_now``) — so the local model is whatever ``local.model`` "auto"
picks for a Chinese memory — and each question below (ours: reworded, not the articles'
sentences) is asked as the default call (maxResults 6, minScore 0.35). A hit is a result whose
lines hold a line matching the question's answer pattern, in any of the files.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inline_index import index_now

from memoryd.services.query.engine import QueryService
from memoryd.services.query.models import SearchRequest
from memoryd.shared.config.loader import load_settings

K = 6
#: (question, a pattern of the line that answers it).
QUESTIONS = [
    ("相邻的两个记忆片段之间共享多少内容？", r"80\s*个?\s*tokens?"),
    ("语义检索和关键词检索的分数按什么比例合成？", r"0\.7|70\s*[:：]\s*30"),
    ("得分太低的检索结果会被丢弃，门槛是多少？", r"0\.35"),
    ("改完笔记以后系统要等多久才重新处理文件？", r"1\.5\s*秒"),
    ("为什么不需要单独部署一个向量数据库？", r"sqlite-vec"),
    ("人名、编号、日期这类精确信息靠哪种检索找回？", r"BM25"),
    ("模型服务商把提示词前缀缓存多长时间？", r"5\s*分钟"),
    ("上下文快满时，什么条件下会先把重要信息写进记忆？",
     r"contextWindow\s*-\s*reserveTokensFloor\s*-\s*softThresholdTokens"),
    ("softThresholdTokens 到底代表什么意思？", r"间距"),
    ("工具输出太长时，轻度裁剪会留下哪些部分？", r"头和尾|头部和尾部|开头和结尾"),
    ("什么情况下整段工具结果会被换成占位符？", r"hardClearRatio|Hard Clear|硬清除"),
    ("内容没有变化的文本块怎样避免再算一次向量？", r"哈希"),
    ("每个文本块变成的向量有多少维？", r"1536"),
    ("索引数据库里有哪些核心的表？", r"四张核心表|四张表"),
    ("每天一个日记文件，半年下来会有多少个？", r"180"),
    ("作者认为记忆和上下文应该归谁所有？", r"属于用户|回到每个用户手上"),
    ("搜索“那个数据库配置”时，关键词检索为什么找不到对应的变量名？", r"POSTGRES_URL"),
    ("哪种文件才是人能直接查看和修改的原始记忆？", r"Markdown"),
    ("压缩时为模型回复预留的最少 token 是多少？", r"20000|reserveTokensFloor"),
    ("这个智能体能帮用户处理哪些日常事务？", r"邮件|日历|航班"),
]


@dataclass(frozen=True)
class Outcome:
    question: str
    hit: bool
    rank: int | None
    provider: str


def build(directory: Path, root: Path, provider: str, search: dict[str, Any]) -> Any:
    """One agent whose memory is the articles, one file each, indexed with the default settings."""
    workspace = directory / "seeds" / "workspace"
    if not workspace.exists():
        (workspace / "memory").mkdir(parents=True)
        for n, article in enumerate(sorted(root.glob("*.txt"))):
            shutil.copyfile(article, workspace / "memory" / f"seed-{n}.md")
    config = {"agents": {"defaults": {"memorySearch": {"provider": provider, **search}},
                         "list": [{"id": "seeds", "workspace": str(workspace)}]},
              "memoryd": {"stateDir": str(directory / "seeds-state")}}
    path = directory / "seeds.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    settings = load_settings(path, state_dir=directory / "seeds-state")
    index_now(settings, "seeds")
    return settings


def ask(service: QueryService, workspace: Path) -> list[Outcome]:
    files = {p.relative_to(workspace).as_posix(): p.read_text(encoding="utf-8").split("\n")
             for p in (workspace / "memory").glob("*.md")}
    out = []
    for question, pattern in QUESTIONS:
        answer = service.search("seeds", SearchRequest(query=question, max_results=K))
        rank = next((i for i, r in enumerate(answer.results, start=1)
                     if any(re.search(pattern, line) for line in files[r.path][r.start_line - 1:r.end_line])), None)
        out.append(Outcome(question, rank is not None, rank, answer.provider))
    return out


def report(outcomes: list[Outcome]) -> dict[str, Any]:
    return {"n": len(outcomes), f"R@{K}": round(sum(o.hit for o in outcomes) / max(len(outcomes), 1), 3),
            "found": sum(o.hit for o in outcomes), "providers": sorted({o.provider for o in outcomes}),
            "missed": [o.question for o in outcomes if not o.hit]}

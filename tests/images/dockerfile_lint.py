"""A small Dockerfile reader and the hadolint-style checks the project's images must pass.

Parsing follows the Dockerfile reference closely enough for these files: parser directives and comments,
backslash line continuations, exec (JSON) versus shell form, ``ARG`` defaults before ``FROM``, stages and
their aliases. The checks return findings (rule id + line + message) rather than raising, so a test can
show both that the real files are clean and that a bad file is caught.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # the raw argument text, continuations joined
    line: int  # 1-based line of the instruction's first line

    def exec_form(self) -> list[str] | None:
        """The JSON array of exec form, or None for shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        return None


@dataclass
class Stage:
    base: str  # as written (may contain ${ARG})
    resolved_base: str
    alias: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.rule} line {self.line}: {self.message}"


def parse(text: str) -> list[Instruction]:
    instructions: list[Instruction] = []
    escape = "\\"
    buf: list[str] = []
    start = 0
    in_directives = True
    for n, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if in_directives:
            m = re.match(r"#\s*(\w+)\s*=\s*(\S+)\s*$", stripped)
            if m:
                if m.group(1).lower() == "escape":
                    escape = m.group(2)
                continue
            in_directives = False
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and (not stripped or stripped.startswith("#")):
            continue  # comments and blank lines inside a continued instruction are dropped
        if not buf:
            start = n
        if stripped.endswith(escape):
            buf.append(stripped[: -len(escape)])
            continue
        buf.append(stripped)
        joined = " ".join(part.strip() for part in buf)
        buf = []
        keyword, _, args = joined.partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
    if buf:
        raise ValueError(f"line {start}: instruction ends with a line continuation")
    return instructions


def _substitute(value: str, args: dict[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return args.get(name, "")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, value)


def stages(instructions: list[Instruction]) -> list[Stage]:
    global_args: dict[str, str] = {}
    result: list[Stage] = []
    for ins in instructions:
        if ins.keyword == "ARG" and not result:
            name, _, default = ins.args.partition("=")
            global_args[name.strip()] = default.strip().strip('"')
        elif ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--")]
            alias = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            result.append(
                Stage(
                    base=words[0],
                    resolved_base=_substitute(words[0], global_args),
                    alias=alias,
                    line=ins.line,
                )
            )
        elif result:
            result[-1].instructions.append(ins)
        else:
            raise ValueError(f"line {ins.line}: {ins.keyword} before the first FROM")
    if not result:
        raise ValueError("no FROM instruction")
    return result


def _image_tag(ref: str) -> str | None:
    if "@sha256:" in ref:
        return "@digest"
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def dockerignore_patterns(text: str) -> list[str]:
    return [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _segment_regex(seg: str) -> str:
    out = []
    for ch in seg:
        out.append("[^/]*" if ch == "*" else "[^/]" if ch == "?" else re.escape(ch))
    return "".join(out)


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Go filepath.Match per segment, plus ``**`` for any number of segments (as Docker does)."""
    regex = ""
    for seg in PurePosixPath(pattern.strip("/")).parts:
        if seg == "**":
            regex += "(?:[^/]+/)*"
        else:
            regex += _segment_regex(seg) + "/"
    return re.compile("^" + regex.removesuffix("/") + "$")


def is_ignored(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` (relative to the context) or a parent of it is excluded; later rules win."""
    candidates = [str(p) for p in reversed(PurePosixPath(path).parents) if str(p) != "."]
    candidates.append(str(PurePosixPath(path)))
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex(pattern.lstrip("!"))
        if any(regex.match(c) for c in candidates):
            ignored = not negate
    return ignored


def check(dockerfile: Path, context: Path) -> list[Finding]:
    """The rules the project's images follow (hadolint ids where one exists)."""
    instructions = parse(dockerfile.read_text())
    all_stages = stages(instructions)
    aliases = {s.alias for s in all_stages if s.alias}
    ignore_file = context / ".dockerignore"
    ignore = dockerignore_patterns(ignore_file.read_text()) if ignore_file.exists() else []
    findings: list[Finding] = []

    for s in all_stages:
        if s.resolved_base in aliases:
            continue
        tag = _image_tag(s.resolved_base)
        if tag is None:
            findings.append(Finding("DL3006", s.line, f"base image {s.base!r} has no tag"))
        elif tag == "latest":
            findings.append(Finding("DL3007", s.line, f"base image {s.base!r} uses 'latest'"))

    for ins in instructions:
        shell = ins.args if ins.exec_form() is None else " ".join(ins.exec_form() or [])
        if ins.keyword == "ADD" and not re.match(r"(--\S+\s+)*(https?://|\S+\.tar)", ins.args):
            findings.append(Finding("DL3020", ins.line, "use COPY, not ADD, for files and folders"))
        if ins.keyword == "RUN":
            if re.search(r"\bpip3? install\b", shell) and "--no-cache-dir" not in shell:
                findings.append(Finding("DL3042", ins.line, "pip install without --no-cache-dir"))
            if re.search(r"\bapt-get install\b", shell):
                if "--no-install-recommends" not in shell:
                    findings.append(
                        Finding(
                            "DL3015", ins.line, "apt-get install without --no-install-recommends"
                        )
                    )
                if "rm -rf /var/lib/apt/lists" not in shell:
                    findings.append(Finding("DL3009", ins.line, "apt lists not removed"))
            if (
                re.search(r"\buseradd\b", shell)
                and re.search(r"(-u|--uid)[ =]?\d{5,}", shell)
                and not re.search(r"\s(-l|--no-log-init)\b", shell)
            ):
                # A high uid makes lastlog/faillog huge sparse files in the layer.
                findings.append(Finding("DL3046", ins.line, "useradd with a high uid without -l"))
            if re.search(r"(^|[;&|]\s*)(sudo)\b", shell):
                findings.append(Finding("DL3004", ins.line, "do not use sudo"))
        if ins.keyword == "COPY" and "--from=" not in ins.args:
            form = ins.exec_form()
            words = form if form is not None else shlex.split(ins.args)
            sources = [w for w in words if not w.startswith("--")][:-1]
            for src in sources:
                if not (context / src).exists():
                    findings.append(Finding("COPY-SRC", ins.line, f"{src!r} is not in the context"))
                elif is_ignored(src, ignore):
                    findings.append(
                        Finding("COPY-IGNORED", ins.line, f"{src!r} is excluded by .dockerignore")
                    )

    final = all_stages[-1].instructions
    users = [i for i in final if i.keyword == "USER"]
    if not users:
        findings.append(
            Finding("DL3002", all_stages[-1].line, "final stage runs as root (no USER)")
        )
    else:
        user = users[-1].args.split(":")[0].strip()
        if user in {"root", "0"}:
            findings.append(Finding("DL3002", users[-1].line, "last USER is root"))
    for kw in ("ENTRYPOINT", "CMD"):
        for ins in final:
            if ins.keyword == kw and ins.exec_form() is None:
                findings.append(Finding("DL3025", ins.line, f"{kw} not in exec (JSON) form"))
    return findings


def final_instruction(dockerfile: Path, keyword: str) -> Instruction | None:
    final = stages(parse(dockerfile.read_text()))[-1].instructions
    matches = [i for i in final if i.keyword == keyword]
    return matches[-1] if matches else None


def exposed_ports(dockerfile: Path) -> set[int]:
    final = stages(parse(dockerfile.read_text()))[-1].instructions
    ports: set[int] = set()
    for ins in final:
        if ins.keyword == "EXPOSE":
            ports.update(int(p.split("/")[0]) for p in ins.args.split())
    return ports

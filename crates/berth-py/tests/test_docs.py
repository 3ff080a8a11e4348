"""docs/python.md and ``python -m berth --help`` agree (issue 44): every option the help lists
is in the options table with the default the help gives, every flag of the table is one the
help lists, and every other server's spelling the help lists (the "other servers' spellings"
group) is in the "Coming from uvicorn, gunicorn or granian" table. A flag added without its
row, or a default changed in one place only, fails here."""

import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
PAGE = os.path.join(ROOT, "docs", "python.md")


def help_text():
    out = subprocess.run([sys.executable, "-m", "berth", "--help"], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def help_options(text):
    """{group title: {flag: default or None}} from argparse's help (another name of a flag is
    kept as ``alias NAME``)."""
    groups, group, flag, said = {}, None, None, {}
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            group = line[:-1]
            groups[group] = {}
            continue
        if group is None:
            continue
        m = re.match(r"  (-[^ ].*?)(  |$)", line)
        if m:
            flags = [f.split(" ")[0] for f in m.group(1).split(", ")]
            flag = next((f for f in flags if f.startswith("--")), flags[0])
            groups[group][flag] = None
            said[(group, flag)] = ""
            for f in flags:
                if f != flag:
                    groups[group]["alias " + f] = flag
        if flag is not None and (group, flag) in said:
            said[(group, flag)] += " " + line.strip()
    for (group, flag), words in said.items():
        d = re.search(r"\(default: ([^)]*)\)", words)
        if d:
            groups[group][flag] = d.group(1)
    return groups


def table(heading):
    """The rows of the first table after ``heading``: (flags in its first cell, default
    cell, the row's whole text)."""
    text = open(PAGE).read().splitlines()
    start = text.index(heading)
    rows, seen = [], False
    for line in text[start + 1:]:
        if not line.startswith("|"):
            if seen:
                break
            continue
        seen = True
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not cells or cells[0].startswith("---") or cells[0] in ("option", "uvicorn"):
            continue
        flags = [w for code in re.findall(r"`([^`]*)`", cells[0])
                 for w in re.split(r"[ ,/()]+", code) if w.startswith("-")]
        rows.append((flags, cells[1] if len(cells) > 1 else "", line))
    assert rows, heading
    return rows


def test_the_options_table_agrees_with_help():
    groups = help_options(help_text())
    habits = [g for g in groups if g.startswith("other servers' spellings")]
    assert habits, list(groups)
    options = {}
    for name, flags in groups.items():
        if name not in habits and name not in ("options",):
            options.update({f: d for f, d in flags.items() if not f.startswith("alias ")})
    rows = table("## Options")
    in_table = {f for flags, _, _ in rows for f in flags}
    problems = []
    for flag in options:
        # --no-X is X's other half (BooleanOptionalAction), listed with it.
        if flag not in in_table and flag.replace("--no-", "--") not in in_table:
            problems.append("%s: in --help, not in the table" % flag)
    for flags, default, _ in rows:
        defaults = default.split(", ")
        for i, flag in enumerate(flags):
            if flag.startswith("--no-") or flag not in options:
                if flag not in options and not flag.startswith("--no-") and \
                        not any(flag in g or "alias " + flag in g for g in groups.values()):
                    problems.append("%s: in the table, not in --help" % flag)
                continue
            said = options[flag]
            if said is None or " " in said:
                continue  # a default the help words (the table words it its own way)
            cell = (defaults[i] if len(defaults) == len(flags) else default).strip("`")
            said = {"none": "—"}.get(said, re.sub(r"^(\d+)\.0$", r"\1", said))
            if not cell.startswith(said):
                problems.append("%s: the table says %r, --help (default: %s)" % (flag, cell, said))
    assert not problems, "docs/python.md and python -m berth --help disagree:\n" + \
        "\n".join(problems)


def test_every_other_servers_spelling_is_in_the_table():
    groups = help_options(help_text())
    habits = next(g for n, g in groups.items() if n.startswith("other servers' spellings"))
    page = "\n".join(line for _, _, line in table("## Coming from uvicorn, gunicorn or granian"))
    missing = [f for f in habits if not f.startswith("alias ") and "`%s" % f not in page]
    missing += [f[len("alias "):] for f in habits if f.startswith("alias ")
                and "`%s" % f[len("alias "):] not in page]
    assert not missing, "not in docs/python.md's table from other servers: %s" % missing

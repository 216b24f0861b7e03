#!/usr/bin/env python3
"""Renders chat templates the way Hugging Face transformers does (transformers/utils/chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols, its tojson filter
(ensure_ascii=False, sort_keys=False), raise_exception and strftime_now), with Debian's python3-jinja2.

  oracle.py CASES.json  ->  a JSON list, one {"text": ...} or {"error": ...} per case

A case: {"template": SOURCE, "bos_token", "eos_token", "messages", "tools", "add_generation_prompt", "extra",
"now"} (now: the UTC time strftime_now formats)."""
import datetime
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def compiled(case):
    """The case's template compiled once, as a function that renders the case (bench/baselines times it)."""
    now = datetime.datetime.fromtimestamp(case.get("now", 0), tz=datetime.timezone.utc)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    template = env.from_string(case["template"])
    variables = {}
    for token in ("bos_token", "eos_token"):
        if case.get(token):
            variables[token] = case[token]
    variables.update(messages=case["messages"], tools=case.get("tools"), documents=None,
                     add_generation_prompt=case.get("add_generation_prompt", False))
    variables.update(case.get("extra") or {})
    return lambda: template.render(**variables)


def render(case):
    return compiled(case)()


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    out = []
    for case in cases:
        try:
            out.append({"text": render(case)})
        except Exception as e:  # noqa: BLE001 - any failure is an "error" outcome to compare
            out.append({"error": type(e).__name__ + ": " + str(e)})
    sys.stdout.write(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()

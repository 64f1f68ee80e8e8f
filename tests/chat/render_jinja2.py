"""Renders every case in cases.json with Python Jinja2 configured as transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson/raise_exception/strftime_now) -- the reference implementation.
Prints {case name: {"ok": true, "output": ...} | {"ok": false, "error": ...}} as JSON.
Usage: python3 render_jinja2.py <tests/chat dir>
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def main():
    directory = sys.argv[1]
    with open(os.path.join(directory, "cases.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(os.path.join(directory, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    now = datetime.datetime.fromtimestamp(manifest["now"], tz=datetime.timezone.utc)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    results = {}
    templates = {}
    for case in manifest["cases"]:
        try:
            name = case["template"]
            if name not in templates:
                with open(os.path.join(directory, "templates", name + ".jinja"), encoding="utf-8") as f:
                    templates[name] = env.from_string(f.read())
            conv = conversations[case["conversation"]]
            context = dict(case.get("kwargs", {}))
            context.update(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                           add_generation_prompt=case["add_generation_prompt"],
                           bos_token=case["bos_token"], eos_token=case["eos_token"])
            results[case["name"]] = {"ok": True, "output": templates[name].render(**context)}
        except Exception as e:  # noqa: BLE001 -- every failure is a result to compare
            results[case["name"]] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(results))


if __name__ == "__main__":
    main()

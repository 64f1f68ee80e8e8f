"""Developer check: runs the context-free EXPECT_EQ(render(...), ...) cases of jinja_test.cc
through Python Jinja2 set up like transformers and prints any case where Jinja2 disagrees with
the expectation. Known: {% generation %} is a transformers extension, absent from plain Jinja2.
Usage: python3 tests/chat/jinja2_unit_check.py
"""
import re, json, ast, datetime, sys
import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
import os
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'jinja_test.cc')).read()
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson'] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def rexc(m): raise jinja2.exceptions.TemplateError(m)
env.globals['raise_exception'] = rexc
now = datetime.datetime.fromtimestamp(1721995200, tz=datetime.timezone.utc)
env.globals['strftime_now'] = lambda f: now.strftime(f)
lit = r'((?:"(?:[^"\\]|\\.)*"\s*)+)'
pat = re.compile(r'EXPECT_EQ\(render\(' + lit + r'(?:,\s*(\w+))?\),\s*' + lit + r'\);', re.S)
def cstr(s):
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', s)
    return b''.join(ast.literal_eval('b"' + p + '"') for p in parts).decode('utf-8')
n = bad = 0
for m in pat.finditer(src):
    t, ctxname, want = cstr(m.group(1)), m.group(2), cstr(m.group(3))
    if ctxname: continue  # contexts are C++ JSON builders; skipped here
    n += 1
    try: got = env.from_string(t).render()
    except Exception as e: got = 'ERROR ' + type(e).__name__ + ': ' + str(e)
    if got != want:
        bad += 1; print('TEMPLATE', repr(t)); print('  ours  ', repr(want)); print('  jinja2', repr(got))
print(n, 'checked', bad, 'differ')

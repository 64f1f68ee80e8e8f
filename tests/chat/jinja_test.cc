// Unit tests of the Jinja subset, construct by construct, and of its error messages.
#include <gtest/gtest.h>

#include <thread>

#include "chat/chat_template.h"

namespace gb::chat {
namespace {

using Json = nlohmann::ordered_json;

std::string render(std::string_view src, const Json& ctx = Json::object()) {
  auto t = ChatTemplate::parse(src);
  if (!t.is_ok()) return "PARSE ERROR: " + t.message();
  RenderOptions opts;
  opts.now = 1721995200;  // 2024-07-26 12:00:00 UTC
  auto r = t->render(ctx, opts);
  if (!r.is_ok()) return "RENDER ERROR: " + r.message();
  return *r;
}

std::string parse_error(std::string_view src) {
  auto t = ChatTemplate::parse(src);
  return t.is_ok() ? "" : t.message();
}

std::string render_error(std::string_view src, const Json& ctx = Json::object()) {
  auto t = ChatTemplate::parse(src);
  if (!t.is_ok()) return "PARSE ERROR: " + t.message();
  RenderOptions opts;
  opts.max_steps = 1'000'000;  // keeps the budget tests fast
  auto r = t->render(ctx, opts);
  return r.is_ok() ? "" : r.message();
}

TEST(JinjaText, PlainTextAndComments) {
  EXPECT_EQ(render("hello"), "hello");
  EXPECT_EQ(render("a{# comment #}b"), "ab");
  EXPECT_EQ(render(""), "");
  EXPECT_EQ(render("x\n"), "x");  // keep_trailing_newline=False drops one final newline
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}"), "{{ not parsed }}");
  // Jinja normalizes \r\n and \r to \n in template text and string literals.
  EXPECT_EQ(render("a\r\nb\rc{{ 'x\r\ny' }}"), "a\nb\ncx\ny");
}

TEST(JinjaText, WhitespaceControl) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true %}b{% endif %}"), "ab");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation before it.
  EXPECT_EQ(render("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
  // {{ }} keeps its newline; comments are trimmed like blocks.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
  EXPECT_EQ(render("  {# c #}\nb"), "b");
}

TEST(JinjaExpr, Literals) {
  EXPECT_EQ(render("{{ 'a\\n\\t\\'\"' }}"), "a\n\t'\"");
  EXPECT_EQ(render("{{ \"x\" 'y' }}"), "xy");
  EXPECT_EQ(render("{{ '\\u00e9\\x41' }}"),
            "\xc3\xa9"
            "A");
  EXPECT_EQ(render("{{ 42 }} {{ 1.5 }} {{ 1_000 }} {{ 2.0 }} {{ 1e3 }}"), "42 1.5 1000 2.0 1000.0");
  EXPECT_EQ(render("{{ true }} {{ False }} {{ none }} {{ None }}"), "True False None None");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }}"), "[1, 'a', None, True]");
  EXPECT_EQ(render("{{ {'a': 1, 'b': [2]} }}"), "{'a': 1, 'b': [2]}");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ () }}"), "(1, 2) (1,) ()");
  EXPECT_EQ(render("{{ \"it's\" }} {{ [\"it's\"] }}"), "it's [\"it's\"]");
}

TEST(JinjaExpr, Arithmetic) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
            "7 9 3 -4 1 2");
  EXPECT_EQ(render("{{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -3 }} {{ 1.5 + 1 }}"),
            "3.5 2.0 1024 0.5 -3 2.5");
  EXPECT_EQ(render("{{ 'a' + 'b' }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 ~ 'x' ~ none }}"), "ab ababab [1, 2] 1xNone");
  EXPECT_EQ(render("{{ true + 1 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }}"), "2 0.30000000000000004 1e+20 1e-05");
  EXPECT_NE(render_error("{{ 1 / 0 }}").find("division by zero"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a' + 1 }}").find("unsupported operand type(s) for +: 'str' and 'int'"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
}

TEST(JinjaExpr, LogicAndComparison) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 < 2 > 3 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }}"),
            "True False True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 1 }} {{ not [] }} {{ not 1 }}"), "x y  True False");
  EXPECT_EQ(render("{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}]"), "y n []");
  EXPECT_EQ(render("{{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }}"), "True True True");
}

TEST(JinjaExpr, AttributesSubscriptsSlices) {
  Json ctx = {{"m", {{"role", "user"}, {"n", {1, 2, 3, 4, 5}}}}, {"s", "h\xc3\xa9llo"}};
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ m.n[0] }} {{ m.n[-1] }} {{ m.n.1 }}", ctx), "user user 1 5 2");
  EXPECT_EQ(render("[{{ m.missing }}] {{ m.missing is defined }} {{ m.n[10] is defined }}", ctx), "[] False False");
  EXPECT_EQ(render("{{ m.n[1:3] }} {{ m.n[::-1] }} {{ m.n[:-2] }} {{ m.n[::2] }} {{ m.n[-2:] }}", ctx),
            "[2, 3] [5, 4, 3, 2, 1] [1, 2, 3] [1, 3, 5] [4, 5]");
  EXPECT_EQ(render("{{ s[1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s|length }}", ctx), "\xc3\xa9 oll\xc3\xa9h \xc3\xa9l 5");
  EXPECT_EQ(render("{{ none.x is defined }}"), "False");
  EXPECT_NE(render_error("{{ nothing.x }}").find("'nothing' is undefined"), std::string::npos);
}

TEST(JinjaStmt, IfElifElse) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 3}}), "many");
  EXPECT_EQ(render("{% if undefined_thing %}y{% else %}n{% endif %}"), "n");
}

TEST(JinjaStmt, ForLoop) {
  Json ctx = {{"xs", {"a", "b", "c"}}, {"d", {{"k1", 1}, {"k2", 2}}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
                   ctx),
            "10aTrueFalse332;21bFalseFalse321;32cFalseTrue310;");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}", ctx),
            ">a>b a>b>c b>c> ");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}", ctx), "k1=1,k2=2,");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", ctx), "k1k2");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", ctx), "a2c2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}{% endfor %}", ctx), "ac");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx), "a");
  EXPECT_EQ(render("{% for c in 'ab' %}[{{ c }}]{% endfor %}{% for i in range(3) %}{{ i }}{% endfor %}"), "[a][b]012");
  EXPECT_EQ(
      render("{% for i in range(1, 10, 4) %}{{ i }}{% endfor %}{% for i in range(3, 0, -1) %}{{ i }}{% endfor %}"),
      "159321");
  // A loop has its own scope: assignments inside do not leak out.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}"),
            "1112");
}

TEST(JinjaStmt, SetAndNamespace) {
  EXPECT_EQ(render("{% set x = 'a' %}{{ x }}{% set y, z = 1, 2 %}{{ y }}{{ z }}"), "a12");
  EXPECT_EQ(render("{% set ns = namespace(found=false, n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}"),
            "True 6");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.index = 0 %}{{ ns.index }}"), "0");
  EXPECT_EQ(render("{% set b %}in {{ 'block' }}{% endset %}[{{ b }}]"), "[in block]");
  EXPECT_EQ(render("{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");  // if has no scope
  EXPECT_NE(render_error("{% set d = {} %}{% set d.x = 1 %}").find("only namespace() objects"), std::string::npos);
  // A namespace holding itself must neither leak nor recurse forever.
  EXPECT_NE(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("nested too deeply"),
            std::string::npos);
}

TEST(JinjaStmt, MacrosAndCall) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}"),
            "Hi a! Hi b? Hi c.");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inside{% endcall %}"), "<inside>");
  EXPECT_EQ(render("{% macro m(x) %}{{ x }}{{ top }}{% endmacro %}{% set top = 'T' %}{{ m(1) }}"), "1T");
  EXPECT_EQ(render("{% macro m(c) %}{% if c is string %}s{% else %}{% for i in c %}{{ i.text }}{% endfor %}{% endif %}"
                   "{% endmacro %}{{ m('x') }}{{ m([{'text': 'a'}, {'text': 'b'}]) }}|{{ m('  y ')|trim }}"),
            "sab|s");
  EXPECT_NE(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("too deep"), std::string::npos);
}

TEST(JinjaStmt, FilterBlockWithAndGeneration) {
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]");
  EXPECT_EQ(render("{% generation %}gen{% endgeneration %}"), "gen");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("[{{ '  a b  '|trim }}] {{ 'xxaxx'|trim('x') }} {{ 'abc'|upper }} {{ 'ABC'|lower }}"),
            "[a b] a ABC abc");
  EXPECT_EQ(render("{{ 'hello world'|capitalize }} {{ 'hello wORLD-x'|title }} {{ 'aXa'|replace('a', 'b') }}"),
            "Hello world Hello World-X bXb");
  EXPECT_EQ(render("{{ 'abc'|length }} {{ [1, 2]|count }} {{ {'a': 1}|length }} {{ x|length }}"), "3 2 1 0");
  EXPECT_EQ(
      render(
          "{{ 5|string ~ '!' }} {{ '42'|int + 1 }} {{ 'x'|int }} {{ '3.5'|float }} {{ 3.9|int }} {{ '12abc'|int(7) }}"),
      "5! 43 0 3.5 3 7");
  EXPECT_EQ(render("{{ '<a href=\"x\">'|escape }} {{ 'x'|safe }} {{ 'a b c'|wordcount }}"),
            "&lt;a href=&#34;x&#34;&gt; x 3");
  EXPECT_EQ(
      render("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}"),
      "a\n  b\n\n  c|  a\n  b|a\n  \n  b");
  EXPECT_EQ(render("{{ u|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ u|d('x') }}"), "d  d x");
  EXPECT_EQ(render("{{ -3|abs }} {{ 2.5|round }} {{ 2.345|round(2) }} {{ 2.7|round(0, 'floor') }}"), "3 2.0 2.35 2.0");
}

TEST(JinjaFilters, Sequences) {
  Json ctx = {{"ms", {{{"role", "system"}, {"c", 1}}, {{"role", "user"}, {"c", 2}}, {{"role", "user"}, {"c", 3}}}}};
  EXPECT_EQ(render("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'c']|sort }}"),
            "[1, 2, 3] [3, 2, 1] ['A', 'b', 'c']");
  EXPECT_EQ(render("{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ [1, 2]|reverse|list }} {{ 'ab'|reverse }}"),
            "1 3 [2, 1] ba");
  EXPECT_EQ(render("{{ [1, 2, 3]|join(', ') }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ [1, 2, 3]|sum }}"),
            "1, 2, 3 ['a', 'b'] 6");
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|list|length }} "
                   "{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='c')|list }} "
                   "{{ ms|map(attribute='role')|unique|join(',') }} {{ [1, 2, 3, 4]|select('odd')|list }} "
                   "{{ ['a', 'b']|map('upper')|list }} {{ ms|selectattr('missing')|list }}",
                   ctx),
            "2 [1] system,user [1, 3] ['A', 'B'] []");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|items|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ 'ab'|list }}"),
            "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)] ['a', 'b']");
  EXPECT_EQ(
      render(
          "{{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ms|sort(attribute='c', reverse=true)|map(attribute='c')|list }}",
          ctx),
      "1 3 [3, 2, 1]");
}

TEST(JinjaFilters, ToJson) {
  Json ctx = {{"t", {{"name", "f"}, {"params", {{"x", 1.5}, {"y", {true, nullptr}}}}, {"s", "\xc3\xa9\"\n"}}}};
  EXPECT_EQ(render("{{ t|tojson }}", ctx),
            "{\"name\": \"f\", \"params\": {\"x\": 1.5, \"y\": [true, null]}, \"s\": \"\xc3\xa9\\\"\\n\"}");
  EXPECT_EQ(
      render("{{ t|tojson(indent=2) }}", ctx),
      "{\n  \"name\": \"f\",\n  \"params\": {\n    \"x\": 1.5,\n    \"y\": [\n      true,\n      null\n    ]\n  },\n"
      "  \"s\": \"\xc3\xa9\\\"\\n\"\n}");
  EXPECT_EQ(render("{{ t.s|tojson(ensure_ascii=true) }} {{ {'b': 1, 'a': []}|tojson(sort_keys=true) }}", ctx),
            "\"\\u00e9\\\"\\n\" {\"a\": [], \"b\": 1}");
  EXPECT_EQ(render("{{ {'a': 1}|tojson(separators=(',', ':')) }} {{ 'x'|tojson }} {{ 3|tojson }}"),
            "{\"a\":1} \"x\" 3");
}

TEST(JinjaTests, Builtins) {
  Json ctx = {{"s", "x"}, {"n", nullptr}, {"i", 3}, {"f", 1.5}, {"l", {1}}, {"d", {{"a", 1}}}, {"b", true}};
  EXPECT_EQ(render("{{ s is defined }}{{ u is undefined }}{{ n is none }}{{ s is string }}{{ i is number }}"
                   "{{ i is integer }}{{ f is float }}{{ f is integer }}{{ d is mapping }}{{ l is iterable }}"
                   "{{ l is sequence }}{{ s is iterable }}{{ d is sequence }}{{ i is iterable }}",
                   ctx),
            "TrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse");
  EXPECT_EQ(
      render("{{ b is true }}{{ b is false }}{{ b is boolean }}{{ i is odd }}{{ i is even }}{{ 9 is divisibleby 3 }}"
             "{{ s is equalto 'x' }}{{ s is eq('y') }}{{ 1 is in [1] }}{{ s is not none }}{{ i is gt 2 }}{{ 'ab' is "
             "lower }}",
             ctx),
      "TrueFalseTrueTrueFalseTrueTrueFalseTrueTrueTrueTrue");
}

TEST(JinjaMethods, StringDictList) {
  EXPECT_EQ(render("[{{ '  a  '.strip() }}][{{ 'xxa'.lstrip('x') }}][{{ 'a\\n\\n'.rstrip('\\n') }}]"), "[a][a][a]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
  EXPECT_EQ(
      render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'ab'.upper() }} {{ 'AB'.lower() }}"),
      "True True AB ab");
  EXPECT_EQ(
      render(
          "{{ 'hello world'.title() }} {{ 'x-y'.replace('-', '+') }} {{ 'abcb'.find('b') }} {{ 'abcb'.count('b') }}"),
      "Hello World x+y 1 2");
  EXPECT_EQ(
      render("{{ ', '.join(['a', 'b']) }} {{ '{} and {name}'.format(1, name='x') }} {{ 'ab'.removeprefix('a') }}"),
      "a, b 1 and x b");
  EXPECT_EQ(render("{{ '<think>x</think>\\n\\ny'.split('</think>')[-1].lstrip('\\n') }}"), "y");
  Json ctx = {{"d", {{"a", 1}, {"b", 2}}}};
  EXPECT_EQ(
      render("{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}",
             ctx),
      "['a', 'b'] [1, 2] 1 dflt None");
  EXPECT_EQ(render("{{ [1, 2, 2].count(2) }} {{ ['a', 'b'].index('b') }}"), "2 1");
}

TEST(JinjaGlobals, RaiseExceptionAndTime) {
  const std::string err = render_error("line one\n{{ raise_exception('Roles must alternate!') }}");
  EXPECT_NE(err.find("Roles must alternate!"), std::string::npos) << err;
  EXPECT_NE(err.find("line 2"), std::string::npos) << err;
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }} {{ strftime_now is defined }}"), "26 Jul 2024 True");
  EXPECT_EQ(render("{{ dict(a=1)|tojson }} {{ namespace(x=1).x }}"), "{\"a\": 1} 1");
}

TEST(JinjaErrors, NamesConstructAndLine) {
  auto has = [](const std::string& msg, const std::string& what) { return msg.find(what) != std::string::npos; };
  std::string e = parse_error("ok\n{% include 'x' %}");
  EXPECT_TRUE(has(e, "unsupported tag 'include'") && has(e, "line 2")) << e;
  e = parse_error("{% frobnicate %}");
  EXPECT_TRUE(has(e, "unknown tag 'frobnicate'") && has(e, "line 1")) << e;
  e = parse_error("a\nb\n{{ x|nosuchfilter }}");
  EXPECT_TRUE(has(e, "unknown filter 'nosuchfilter'") && has(e, "line 3")) << e;
  e = parse_error("{% if x is nosuchtest %}{% endif %}");
  EXPECT_TRUE(has(e, "unknown test 'nosuchtest'")) << e;
  e = parse_error("{{ x.zfill(3) }}");
  EXPECT_TRUE(has(e, "unknown method 'zfill'")) << e;
  e = parse_error("\n{% for x in y %}\nbody");
  EXPECT_TRUE(has(e, "unclosed 'for'") && has(e, "line 2") && has(e, "endfor")) << e;
  e = parse_error("{% if x %}{% endfor %}");
  EXPECT_TRUE(has(e, "unexpected 'endfor'")) << e;
  e = parse_error("{{ 1 + }}");
  EXPECT_TRUE(has(e, "expected an expression") && has(e, "line 1")) << e;
  e = parse_error("{{ 'abc }}");
  EXPECT_TRUE(has(e, "unterminated string")) << e;
  e = parse_error("{{ x ");
  EXPECT_TRUE(has(e, "unclosed tag '{{'")) << e;
  e = parse_error("{# never closed");
  EXPECT_TRUE(has(e, "unclosed comment")) << e;
  e = parse_error("{% break %}");
  EXPECT_TRUE(has(e, "'break' outside of a 'for' loop")) << e;
  e = parse_error("{{ x ! y }}");
  EXPECT_TRUE(has(e, "unexpected character '!'")) << e;
  e = parse_error("{{ x|tojson(indnet=2) }}");
  EXPECT_TRUE(has(e, "filter 'tojson' got an unexpected keyword argument 'indnet'")) << e;
  e = parse_error("{{ x|trim(1, 2) }}");
  EXPECT_TRUE(has(e, "filter 'trim' takes at most 1 argument(s), got 2")) << e;
  e = parse_error("{% if x is string(1) %}{% endif %}");
  EXPECT_TRUE(has(e, "test 'string' takes at most 0 argument(s), got 1")) << e;
  e = render_error("\n\n{{ nosuchfn(1) }}");
  EXPECT_TRUE(has(e, "unknown function 'nosuchfn'") && has(e, "line 3")) << e;
  e = render_error("{{ 'a'.keys() }}");
  EXPECT_TRUE(has(e, "has no method 'keys'")) << e;
  e = render_error("{{ 'x' < 1 }}");
  EXPECT_TRUE(has(e, "'<' not supported")) << e;
}

TEST(JinjaLimits, HostileTemplatesFailCleanly) {
  // Loops that would run for hours stop on the step budget.
  std::string e = render_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(e.find("budget"), std::string::npos) << e;
  e = render_error("{{ 'x' * 1000000000000 }}");
  EXPECT_NE(e.find("exceeds"), std::string::npos) << e;
  e = render_error("{{ range(10000000000) }}");
  EXPECT_NE(e.find("budget"), std::string::npos) << e;
  // Deep nesting is rejected at parse time instead of overflowing the stack.
  EXPECT_NE(
      parse_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").find("nested too deeply"),
      std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_NE(parse_error(chain + " }}").find("nested too deeply"), std::string::npos);
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_NE(parse_error(nots + "1 }}").find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if 1 %}";
  EXPECT_NE(parse_error(ifs).find("nested too deeply"), std::string::npos);
}

TEST(ChatTemplateApi, DefaultTemplateAndOptions) {
  auto t = ChatTemplate::parse(kDefaultChatTemplate);
  ASSERT_TRUE(t.is_ok()) << t.message();
  Json messages = Json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  ChatTemplateOptions opts;
  auto r = apply_chat_template(*t, messages, opts);
  ASSERT_TRUE(r.is_ok()) << r.message();
  EXPECT_EQ(*r, "system: Be brief.\nuser: Hi\n");
  opts.add_generation_prompt = true;
  r = apply_chat_template(*t, messages, opts);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "system: Be brief.\nuser: Hi\nassistant:");
  // kwargs reach the template; tools defaults to None.
  auto t2 = ChatTemplate::parse("{{ enable_thinking }} {{ tools is none }} {{ bos_token }}");
  ASSERT_TRUE(t2.is_ok());
  opts.kwargs = {{"enable_thinking", false}};
  opts.bos_token = "<s>";
  r = apply_chat_template(*t2, messages, opts);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "False True <s>");
  // Plain nlohmann::json contexts work too.
  auto r2 = t2->render(nlohmann::json{{"enable_thinking", true}});
  ASSERT_TRUE(r2.is_ok());
  EXPECT_EQ(*r2, "True False ");
}

TEST(ChatTemplateApi, ConcurrentRenders) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.content }}{% endfor %}{{ ns.n "
      "}}");
  ASSERT_TRUE(t.is_ok());
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      Json ctx = {{"messages", Json::array()}};
      for (int k = 0; k <= i; ++k) ctx["messages"].push_back({{"content", std::to_string(k)}});
      std::string want;
      for (int k = 0; k <= i; ++k) want += std::to_string(k);
      want += std::to_string(i + 1);
      for (int rep = 0; rep < 200; ++rep) {
        auto r = t->render(ctx);
        if (r.is_ok() && *r == want) ++ok[i];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ok[i], 200);
}

}  // namespace
}  // namespace gb::chat

namespace gb::chat {
namespace {

TEST(ChatTemplateConfig, ReadsTemplateAndSpecialTokens) {
  nlohmann::json cfg = nlohmann::json::parse(R"({
    "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
    "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null})");
  EXPECT_EQ(*chat_template_from_config(cfg), "D");
  EXPECT_EQ(*chat_template_from_config(cfg, "tool_use"), "T");
  EXPECT_NE(chat_template_from_config(cfg, "rag").message().find("available: default, tool_use"), std::string::npos);
  EXPECT_EQ(special_token_from_config(cfg, "bos_token"), "<s>");
  EXPECT_EQ(special_token_from_config(cfg, "eos_token"), "</s>");
  EXPECT_EQ(special_token_from_config(cfg, "pad_token"), "");
  EXPECT_FALSE(chat_template_from_config(nlohmann::json::object()).is_ok());
  EXPECT_EQ(*chat_template_from_config(nlohmann::json{{"chat_template", "S"}}), "S");
}

}  // namespace
}  // namespace gb::chat

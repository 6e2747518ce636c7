//! Go's `text/template` semantics, case by case: each expected output is what Go writes for the
//! same template over the same data (a `map[string]interface{}` decoded from JSON).

use serde_json::json;

use super::{
    MAX_DEPTH, MAX_VARIABLES, TemplateError,
    exec::{Data, render},
    parse::parse,
};

fn data() -> Data {
    Data::from(&json!({
        "name": "web", "n": 3, "neg": -7, "f": 1.5, "big": 1_000_000.0, "small": 0.00001,
        "t": true, "no": false, "empty": "", "nul": null,
        "list": ["a", "b", "c"], "nums": [1, 2, 3], "emptylist": [], "emptymap": {},
        "map": {"b": 2, "a": 1, "c": 3},
        "nested": {"x": {"y": "deep"}},
        "mixed": ["s", 1, 2.5, true, null, {"k": "v"}],
        "html": "<a href='x'>&\"</a>"
    }))
}

fn run(text: &str) -> Result<String, TemplateError> {
    render(&parse(text)?, &data())
}

#[test]
fn renders_as_go_does() {
    let cases: &[(&str, &str)] = &[
        // Text, actions, trimming and comments.
        ("plain", "plain"),
        ("", ""),
        ("a {{ .name }} b", "a web b"),
        ("a  {{- .name -}}  b", "awebb"),
        ("a\n\t {{- .name }}\n b", "aweb\n b"),
        ("{{ .name }} \n {{- /* gone */ -}} \n x", "webx"),
        ("a{{/* a comment\n over lines */}}b", "ab"),
        ("{{-3}}", "-3"),
        ("{{ 3 -}} \n4", "34"),
        ("{{\n.name\n}}", "web"),
        // Literals.
        (r#"{{ "a\tb\x41\u00e9\101\\\"" }}"#, "a\tbAéA\\\""),
        ("{{ `raw \\n {{ }}` }}", "raw \\n {{ }}"),
        ("{{ 'a' }} {{ '\\n' }}", "97 10"),
        (
            "{{ 42 }} {{ -1 }} {{ 0x1F }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ 1_000 }}",
            "42 -1 31 15 15 5 1000",
        ),
        (
            "{{ 1.5 }} {{ 1e3 }} {{ .5 }} {{ 1e21 }} {{ 1.0 }}",
            "1.5 1000 0.5 1e+21 1",
        ),
        ("{{ true }} {{ false }}", "true false"),
        // Fields, map keys, missing keys and nil.
        ("{{ .nested.x.y }}", "deep"),
        (
            "{{ .missing }}|{{ .missing.deeper }}|{{ .nul }}",
            "<no value>|<no value>|<no value>",
        ),
        (
            "{{ .n }} {{ .f }} {{ .big }} {{ .small }} {{ .neg }}",
            "3 1.5 1e+06 1e-05 -7",
        ),
        (
            "{{ .list }} {{ .map }} {{ .emptymap }} {{ .mixed }}",
            "[a b c] map[a:1 b:2 c:3] map[] [s 1 2.5 true <nil> map[k:v]]",
        ),
        ("{{ .nested }}", "map[x:map[y:deep]]"),
        // Variables and scopes.
        ("{{ $x := .name }}{{ $x }}", "web"),
        (
            "{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}",
            "2",
        ),
        (
            "{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}",
            "21",
        ),
        (
            "{{ with .nested }}{{ $.name }}{{ .x.y }}{{ end }}",
            "webdeep",
        ),
        ("{{ $m := .nested }}{{ $m.x.y }}", "deep"),
        // Pipelines and parentheses.
        (r#"{{ .name | printf "%s!" }}"#, "web!"),
        (r#"{{ "a" | printf "%s-%s" "b" }}"#, "b-a"),
        (r#"{{ (.nested).x.y }} {{ len (slice .list 1) }}"#, "deep 2"),
        (
            r#"{{ printf "%d" (len .list) | printf "%s%s" "n=" }}"#,
            "n=3",
        ),
        // if / else if / else, with / else, truth.
        ("{{ if .t }}y{{ else }}n{{ end }}", "y"),
        (
            "{{ if .no }}1{{ else if .empty }}2{{ else if .n }}3{{ else }}4{{ end }}",
            "3",
        ),
        (
            "{{ if .emptylist }}1{{ else if .emptymap }}2{{ else if 0 }}3{{ else if 0.0 }}4{{ else }}5{{ end }}",
            "5",
        ),
        (
            "{{ if .missing }}1{{ else if .nul }}2{{ else if .nested }}3{{ end }}",
            "3",
        ),
        ("{{ if $x := .n }}{{ $x }}{{ end }}", "3"),
        (
            "{{ with .nested.x }}{{ .y }}{{ else }}none{{ end }}",
            "deep",
        ),
        ("{{ with .missing }}{{ . }}{{ else }}none{{ end }}", "none"),
        (
            "{{ with .missing }}1{{ else with .name }}{{ . }}{{ end }}",
            "web",
        ),
        // range over lists, maps (in key order), integers; else; break and continue.
        ("{{ range .list }}{{ . }},{{ end }}", "a,b,c,"),
        (
            "{{ range $i, $v := .list }}{{ $i }}={{ $v }} {{ end }}",
            "0=a 1=b 2=c ",
        ),
        (
            "{{ range $k, $v := .map }}{{ $k }}{{ $v }}{{ end }}",
            "a1b2c3",
        ),
        ("{{ range $v := .map }}{{ $v }}{{ end }}", "123"),
        ("{{ range .emptylist }}x{{ else }}empty{{ end }}", "empty"),
        ("{{ range .missing }}x{{ else }}none{{ end }}", "none"),
        ("{{ range 3 }}{{ . }}{{ end }}", "012"),
        (
            "{{ range .nums }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ . }}{{ end }}",
            "13",
        ),
        (
            "{{ range .nums }}{{ if eq . 2 }}{{ break }}{{ end }}{{ . }}{{ end }}",
            "1",
        ),
        (
            "{{ range .list }}{{ range $.nums }}{{ break }}{{ end }}{{ . }}{{ end }}",
            "abc",
        ),
        (
            "{{ $n := 0 }}{{ range .nums }}{{ $n = . }}{{ end }}{{ $n }}",
            "3",
        ),
        (
            "{{ range $i, $v := .list }}{{ end }}{{ range $i, $v := .nums }}{{ $v }}{{ end }}",
            "123",
        ),
        // and, or, not.
        (
            "{{ and 1 2 }} {{ and 0 2 }} {{ or 0 \"\" }} {{ or 0 7 }} {{ not .t }}",
            "2 0  7 false",
        ),
        (
            "{{ or .missing .name }} {{ and .name .missing }}",
            "web <no value>",
        ),
        ("{{ if and .t (not .no) }}y{{ end }}", "y"),
        // len, index, slice.
        (
            "{{ len .name }} {{ len .list }} {{ len .map }} {{ len \"é\" }}",
            "3 3 3 2",
        ),
        (
            "{{ index .list 1 }} {{ index .map \"b\" }} {{ index .nested \"x\" \"y\" }} {{ index .name 0 }}",
            "b 2 deep 119",
        ),
        ("{{ index .map \"zz\" }}", "<no value>"),
        (
            "{{ slice .list 1 }} {{ slice .list 1 2 }} {{ slice .name 1 }} {{ slice .name 0 2 }} {{ slice .list }}",
            "[b c] [b] eb we [a b c]",
        ),
        // print, println.
        (r#"{{ print 1 2 "a" 3 "b" "c" }}"#, "1 2a3bc"),
        (
            r#"{{ print .missing }} {{ print .nul .n }}"#,
            "<nil> <nil> 3",
        ),
        (r#"{{ println 1 "a" }}"#, "1 a\n"),
        // printf.
        (
            r#"{{ printf "%s %d %v %t %%" .name .n .f .t }}"#,
            "web 3 1.5 true %",
        ),
        (
            r#"{{ printf "%q %x %X %x" .name 255 255 "hi" }}"#,
            "\"web\" ff FF 6869",
        ),
        (
            r#"{{ printf "%5d|%-5d|%05d|%+d|%x" 42 42 -42 42 -255 }}"#,
            "   42|42   |-0042|+42|-ff",
        ),
        (
            r#"{{ printf "%8.3f|%-8.2f|%.0f|%f" 3.14159 2.5 2.5 1.0 }}"#,
            "   3.142|2.50    |2|1.000000",
        ),
        (
            r#"{{ printf "%e|%.2e|%g|%g|%.3g" 1234.5678 1234.5678 1234.5678 0.00001234 1234.5678 }}"#,
            "1.234568e+03|1.23e+03|1234.5678|1.234e-05|1.23e+03",
        ),
        (
            r#"{{ printf "%10s|%-10s|%.2s" "abc" "abc" "abcdef" }}"#,
            "       abc|abc       |ab",
        ),
        (
            r#"{{ printf "%v %v %v" .list .map .nul }}"#,
            "[a b c] map[a:1 b:2 c:3] <nil>",
        ),
        (
            r#"{{ printf "%c%c %q %T %T %T" 72 105 'x' .n .name .map }}"#,
            "Hi 'x' int string map[string]interface {}",
        ),
        (
            r#"{{ printf "%#x %#o %b %U" 255 8 5 0x1F600 }}"#,
            "0xff 010 101 U+1F600",
        ),
        (r#"{{ printf "%q" "a\"b\n" }}"#, r#""a\"b\n""#),
        // Comparisons.
        (
            "{{ eq .n 3 }} {{ eq .name \"x\" \"web\" }} {{ ne .n 4 }} {{ eq .f 1.5 }} {{ eq .t true }}",
            "true true true true true",
        ),
        (
            "{{ eq .missing nil }} {{ eq .nul .missing }} {{ eq .name nil }}",
            "true true false",
        ),
        (
            "{{ lt 1 2 }} {{ le 2 2 }} {{ gt .f 1.0 }} {{ ge \"b\" \"a\" }} {{ lt \"B\" \"a\" }}",
            "true true true true true",
        ),
        // Escapers.
        (
            "{{ html .html }}",
            "&lt;a href=&#39;x&#39;&gt;&amp;&#34;&lt;/a&gt;",
        ),
        (
            "{{ js .html }}",
            "\\u003Ca href\\u003D\\'x\\'\\u003E\\u0026\\\"\\u003C/a\\u003E",
        ),
        ("{{ urlquery \"a b&c=d/é\" }}", "a+b%26c%3Dd%2F%C3%A9"),
        (
            "{{ .html | html }}",
            "&lt;a href=&#39;x&#39;&gt;&amp;&#34;&lt;/a&gt;",
        ),
        ("{{ html 1 \"a\" }}", "1a"),
        // Non-ASCII text and identifiers.
        ("é{{ \"ü\" }}🙂{{ .é }}", "éü🙂<no value>"),
    ];
    for (text, want) in cases {
        assert_eq!(run(text).as_deref(), Ok(*want), "{text}");
    }
}

#[test]
fn errors_say_where_and_what_was_expected() {
    let parse_errors: &[(&str, &str)] = &[
        ("{{ .name ", "1:1: unclosed action: expected }}"),
        ("a\nb {{ \"x }}", "2:6: unterminated quoted string"),
        ("{{ `x }}", "unterminated raw quoted string"),
        ("{{ 'ab' }}", "exactly one character"),
        ("{{ /* x */ }}", "1:4: unexpected '/' in action"),
        ("{{ $ := 1 }}", "$ cannot be declared"),
        ("{{/* x }}", "1:1: unclosed comment: expected */}}"),
        ("{{/* x */ y }}", "comment ends before closing delimiter"),
        ("{{ }}", "1:4: missing value for command"),
        ("{{ if }}{{ end }}", "missing value for if"),
        ("{{ if 1 }}x", "1:4: the {{ if }} here has no {{ end }}"),
        ("{{ end }}", "1:4: unexpected {{ end }}"),
        ("{{ else }}", "unexpected {{ else }}"),
        (
            "{{ if 1 }}{{ else }}{{ else }}{{ end }}",
            "a second {{ else }}",
        ),
        (
            "{{ range . }}{{ else if 1 }}{{ end }}",
            "expected }} after else",
        ),
        ("{{ shout 1 }}", "1:4: function \"shout\" not defined"),
        ("{{ $x }}", "undefined variable \"$x\""),
        ("{{ $x = 1 }}", "undefined variable \"$x\""),
        (
            "{{ if 1 }}{{ $x := 1 }}{{ end }}{{ $x }}",
            "undefined variable \"$x\"",
        ),
        ("{{ $a, $b := 1 }}", "too many declarations"),
        ("{{ break }}", "only allowed inside a range"),
        (
            "{{ range . }}{{ else }}{{ break }}{{ end }}",
            "only allowed inside a range",
        ),
        (
            "{{ define \"a\" }}{{ end }}",
            "{{ define }} is not supported",
        ),
        ("{{ template \"a\" }}", "{{ template }} is not supported"),
        (
            "{{ block \"a\" . }}{{ end }}",
            "{{ block }} is not supported",
        ),
        ("{{ print (1 }}", "unclosed left paren"),
        ("{{ print 1) }}", "unexpected \")\""),
        ("{{ 1 | 2 }}", "non executable command in pipeline stage 2"),
        ("{{ print \"a\"1 }}", "unexpected number 1 in operand"),
        ("{{ \"a\".b }}", "unexpected . after a term"),
        ("{{ 1x }}", "bad number syntax"),
        ("{{ 08 }}", "bad number syntax"),
        ("{{ 1i }}", "complex numbers are not supported"),
        ("{{ \"\\q\" }}", "unknown escape sequence"),
        ("{{ \"\\xff\" }}", "not UTF-8"),
        ("{{ print { }}", "unexpected '{' in action"),
        ("{{ : }}", "expected := after :"),
    ];
    for (text, want) in parse_errors {
        let error = parse(text).map(drop).unwrap_err().to_string();
        assert!(error.contains(want), "{text}: {error}");
    }
    let exec_errors: &[(&str, &str)] = &[
        ("{{ nil }}", "nil is not a command"),
        ("{{ .name 1 }}", "name is not a method but has arguments"),
        ("{{ 1 2 }}", "can't give argument to non-function"),
        ("{{ .name.x }}", "can't evaluate field x in type string"),
        (
            "{{ (print .n).x }}",
            "can't evaluate field x in type string",
        ),
        ("{{ .nul.x }}", "nil pointer evaluating .x"),
        ("{{ len 3 }}", "len: the value has no length"),
        ("{{ len }}", "wrong number of args for len: want 1 got 0"),
        ("{{ index .list 5 }}", "index out of range: 5"),
        (
            "{{ index .list \"a\" }}",
            "cannot index with a value of type string",
        ),
        (
            "{{ index .map 1 }}",
            "the key has type int; should be string",
        ),
        ("{{ index .nul 1 }}", "index of untyped nil"),
        ("{{ slice .list 2 1 }}", "invalid slice index"),
        ("{{ slice .name 0 1 2 }}", "cannot 3-index slice a string"),
        ("{{ slice \"é\" 1 }}", "multi-byte character"),
        (
            "{{ eq 1 1.0 }}",
            "incompatible types for comparison: int and float64",
        ),
        ("{{ eq .map .map }}", "non-comparable types"),
        ("{{ eq .map \"x\" }}", "incompatible types for comparison"),
        ("{{ eq 1 }}", "missing argument for comparison"),
        ("{{ lt .t .no }}", "invalid type for comparison"),
        ("{{ lt 1 \"a\" }}", "incompatible types for comparison"),
        ("{{ lt .nul 1 }}", "invalid type for comparison"),
        (
            "{{ range .name }}{{ end }}",
            "range can't iterate over a value of type string",
        ),
        ("{{ range $i, $v := 3 }}{{ end }}", "two variables"),
        (
            "{{ printf \"%d\" .name }}",
            "printf: %d does not fit the value given",
        ),
        (
            "{{ printf \"%s\" 1 }}",
            "printf: %s does not fit the value given",
        ),
        ("{{ printf \"%d %d\" 1 }}", "%d has no value to format"),
        ("{{ printf \"%d\" 1 2 }}", "more values than verbs"),
        ("{{ printf \"%z\" 1 }}", "%z is not a verb printf knows"),
        ("{{ printf \"%*d\" 1 2 }}", "* for a width"),
        (
            "{{ printf \"%99999999999999999999999d\" 1 }}",
            "over the limit of 1000",
        ),
        ("{{ printf \"%.5000f\" 1.0 }}", "over the limit of 1000"),
        ("{{ printf 1 }}", "must be a format string"),
        ("{{ and }}", "wrong number of args for and"),
    ];
    for (text, want) in exec_errors {
        let error = run(text).unwrap_err();
        assert!(
            matches!(error, TemplateError::Exec { .. }),
            "{text}: {error:?}"
        );
        assert!(error.to_string().contains(want), "{text}: {error}");
    }
    // The position of a failing action is kept.
    let error = run("ok\n  {{ .name.x }}").unwrap_err();
    assert_eq!(error.position().to_string(), "2:6");
}

#[test]
fn bounds_hold() {
    let deep_ifs = "{{ if 1 }}".repeat(MAX_DEPTH + 1);
    assert!(matches!(
        parse(&deep_ifs),
        Err(TemplateError::TooDeep { what: "blocks", .. })
    ));
    let deep_parens = format!(
        "{{{{ {}1{} }}}}",
        "(".repeat(MAX_DEPTH + 1),
        ")".repeat(MAX_DEPTH + 1)
    );
    assert!(matches!(
        parse(&deep_parens),
        Err(TemplateError::TooDeep {
            what: "parentheses",
            ..
        })
    ));
    // Variables in scope are bounded; those of a block end with it.
    let many = "{{ $x := 1 }}".repeat(MAX_VARIABLES);
    let error = parse(&many).unwrap_err().to_string();
    assert!(
        error.contains("more than 1000 variables in scope"),
        "{error}"
    );
    let scoped = "{{ if 1 }}{{ $x := 1 }}{{ end }}".repeat(MAX_VARIABLES);
    assert_eq!(run(&scoped).as_deref(), Ok(""));
    // Long else-if chains are not nesting.
    let chain = format!(
        "{{{{ if 0 }}}}{}{{{{ else }}}}last{{{{ end }}}}",
        "{{ else if 0 }}".repeat(200)
    );
    assert_eq!(run(&chain).as_deref(), Ok("last"));
    // A string doubled on every iteration stops at the output bound.
    let doubling =
        "{{ $s := \"ab\" }}{{ range 64 }}{{ $s = printf \"%s%s\" $s $s }}{{ end }}{{ len $s }}";
    assert!(
        matches!(run(doubling), Err(TemplateError::TooLong { .. })),
        "{:?}",
        run(doubling)
    );
    // Nested ranges stop at the step bound.
    let loops = format!("{}x{}", "{{ range 1000 }}".repeat(8), "{{ end }}".repeat(8));
    assert!(matches!(
        run(&loops),
        Err(TemplateError::TooManySteps { .. })
    ));
    let wide = "{{ range 100000 }}{{ printf \"%1000d\" 1 }}{{ end }}";
    assert!(matches!(
        run(wide),
        Err(TemplateError::TooLong { .. } | TemplateError::TooManySteps { .. })
    ));
    let replace = "{{ $s := \"abcdefghij\" }}{{ range 20 }}{{ $s = replace \"\" $s $s }}{{ end }}";
    assert!(run(replace).is_err());
}

#[test]
fn garbage_and_deep_nesting_give_ok_or_err_never_a_panic() {
    const ATOMS: &[&str] = &[
        "{{",
        "}}",
        "{{- ",
        " -}}",
        " ",
        "\t",
        "\n",
        "\"",
        "`",
        "'",
        "\\",
        "-",
        "(",
        ")",
        "|",
        ":=",
        "=",
        ",",
        "/*",
        "*/",
        ".",
        ".name",
        ".list",
        ".map",
        ".nul",
        ".missing",
        "$",
        "$x",
        "$x := ",
        "$i, $v := ",
        "x",
        "1",
        "-1",
        "0x",
        "1e",
        "1.5",
        "'a'",
        "é",
        "🙂",
        "if ",
        "else ",
        "else if ",
        "end",
        "range ",
        "with ",
        "break",
        "continue",
        "nil",
        "true",
        "printf ",
        "print ",
        "index ",
        "slice ",
        "len ",
        "eq ",
        "lt ",
        "and ",
        "or ",
        "not ",
        "html ",
        "js ",
        "urlquery ",
        "default ",
        "quote ",
        "replace ",
        "b64dec ",
        "\"%d\"",
        "\"%s\"",
        "\"%99999999d\"",
        "\"%v%v\"",
        "define ",
        "template ",
    ];
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut rendered = 0;
    for round in 0..20_000 {
        let text: String = (0..1 + next(if round % 10 == 0 { 60 } else { 12 }))
            .map(|_| ATOMS[next(ATOMS.len())])
            .collect();
        if let Ok(tree) = parse(&text) {
            let _ = render(&tree, &data());
            rendered += 1;
        }
    }
    assert!(rendered > 100, "only {rendered} random texts parsed");
    // Deep but allowed nesting runs on a small stack; any deeper is refused.
    let texts = [
        format!(
            "{}{{{{ {}1{} }}}}{}",
            "{{ if 1 }}{{ range 1 }}".repeat(MAX_DEPTH / 2),
            "(print ".repeat(MAX_DEPTH),
            ")".repeat(MAX_DEPTH),
            "{{ end }}".repeat(MAX_DEPTH)
        ),
        "{{ (".repeat(10_000),
        "((((".repeat(10_000),
        "{{ with 1 }}".repeat(10_000),
        format!("{{{{ {} }}}}", "(".repeat(5000)),
        "{{".repeat(10_000),
        "{{ $x := 1 }}".repeat(10_000),
    ];
    let handle = std::thread::Builder::new()
        .stack_size(512 << 10)
        .spawn(move || {
            texts
                .iter()
                .map(|t| parse(t).and_then(|tree| render(&tree, &data())))
                .collect::<Vec<_>>()
        })
        .unwrap();
    let results = handle.join().expect("no stack overflow");
    assert_eq!(results[0].as_deref(), Ok("1"));
    assert!(results[1].is_err() && results[3].is_err() && results[4].is_err());
    assert_eq!(results[2].as_deref(), Ok("((((".repeat(10_000).as_str()));
    assert!(results[5].is_err());
    let many = results[6].as_ref().unwrap_err().to_string();
    assert!(many.contains("variables in scope"), "{many}");
}

"""Regenerate ollama_go_golden.json: what Go's text/template prints for the Go templates
dragonfarm writes for Ollama (one per chat template here) and for a set of small templates that
use every construct `dragonfarm_core.gotemplate` supports.

    python tests/export_templates/make_golden.py       # needs `go` (Debian: golang-go)

tests/test_gotemplate.py renders the same templates on the same data with the Python renderer
and requires the same text, so the renderer is held to real Go without Go in CI. The chat
templates are the models' own (tokenizer_config.json of SmolLM2-135M-Instruct, Qwen2.5-Instruct,
Llama 3 / 3.2 Instruct, Gemma 2 / 3 it, as llama.cpp's and Ollama's repositories keep them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from dragonfarm_core import ollama_check, ollama_template  # noqa: E402

# Ollama parses with Option("missingkey=zero") and these functions (template/template.go).
GO = r"""
package main

import (
	"encoding/json"
	"os"
	"strings"
	"text/template"
)

type Case struct {
	Template string         `json:"template"`
	Data     map[string]any `json:"data"`
}

func main() {
	var cases []Case
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		panic(err)
	}
	funcs := template.FuncMap{
		"json": func(v any) string { b, _ := json.Marshal(v); return string(b) },
	}
	out := []string{}
	for _, c := range cases {
		t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(c.Template)
		if err != nil {
			out = append(out, "PARSE ERROR: "+err.Error())
			continue
		}
		var b strings.Builder
		if err := t.Execute(&b, c.Data); err != nil {
			out = append(out, "EXEC ERROR: "+err.Error())
			continue
		}
		out = append(out, b.String())
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
"""

# The special tokens each template file is rendered with (the models' own).
TOKENS = json.loads((HERE / "tokens.json").read_text(encoding="utf-8"))

MESSAGES = [
    {"Role": "system", "Content": "Be brief."},
    {"Role": "user", "Content": "Hi"},
    {"Role": "assistant", "Content": "Hello!"},
    {"Role": "user", "Content": "Bye"},
]
# Small templates for each construct the renderer supports.
CONSTRUCTS = [
    'a {{- " b " -}} c\n{{- /* a comment */ -}}\n d',
    '{{ if .Missing }}yes{{ else if eq .Name "x" "y" }}x or y{{ else }}no{{ end }}',
    "{{ range $i, $m := .Messages }}{{ if $i }}, {{ end }}{{ $i }}={{ $m.Role }}{{ end }}",
    '{{ range .Messages }}{{ if eq .Role "assistant" }}{{ break }}{{ end }}{{ .Content }};{{ end }}',
    '{{ range .Messages }}{{ if eq .Role "system" }}{{ continue }}{{ end }}[{{ .Content }}]{{ end }}',
    '{{ $s := "" }}{{ range .Messages }}{{ $s = printf "%s%s|" $s .Role }}{{ end }}{{ $s }}',
    "{{ len .Messages }} {{ (index .Messages 1).Content }} {{ len (slice .Messages 2) }}",
    '{{ and .Name .Missing }}|{{ or .Missing .Name }}|{{ not .Missing }}|{{ and 1 0 }}|{{ or 0 "" }}',
    "{{ with .Name }}[{{ . }}]{{ else }}none{{ end }}{{ with .Missing }}x{{ else }}-{{ end }}",
    "{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
    "{{ if $last }}last={{ .Role }}{{ end }}{{ end }}",
    '{{ .Name | printf "<%s>" }} {{ print 1 2 "a" 3 }} {{ printf "%d%%" 5 }} {{ `raw\\n` }}',
    '{{ range .Empty }}item{{ else }}empty{{ end }} {{ if lt 1 2 }}lt{{ end }} {{ ne .Name "y" }}',
    '{{- range .Messages }}\n  {{- if eq .Role "user" }} U:{{ .Content }}\n  {{- end }}\n{{- end }}\n',
]


def cases() -> list[dict]:
    found = []
    for name, tokens in TOKENS.items():
        source = (HERE / f"{name}.jinja").read_text(encoding="utf-8")
        tmpl = ollama_template.translate(source, tokens)
        for n, conversation in enumerate(ollama_check.FIXED_CONVERSATIONS):
            data = ollama_template.ollama_data(tmpl, conversation)
            found.append({"name": f"{name}/{n}", "template": tmpl.template, "data": data})
    for n, template in enumerate(CONSTRUCTS):
        data = {"Name": "x", "Messages": MESSAGES, "Empty": [], "System": "Be brief."}
        found.append({"name": f"construct/{n}", "template": template, "data": data})
    return found


def main() -> None:
    found = cases()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "main.go").write_text(GO)
        done = subprocess.run(
            ["go", "run", "main.go"],
            cwd=tmp,
            input=json.dumps(found),
            capture_output=True,
            text=True,
            check=True,
            env={
                **__import__("os").environ,
                "GOFLAGS": "-mod=mod",
                "GOCACHE": str(Path(tmp) / "cache"),
            },
        )
    outputs = json.loads(done.stdout)
    for case, output in zip(found, outputs, strict=True):
        case["output"] = output
    (HERE / "ollama_go_golden.json").write_text(
        json.dumps(found, indent=1, ensure_ascii=False) + "\n"
    )
    print(f"{len(found)} cases written")


if __name__ == "__main__":
    main()

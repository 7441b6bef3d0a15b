#!/usr/bin/env python3
"""Check the Markdown links between this repository's files: every ](#x) and
](path.md#y) names an existing file and a GitHub-style heading slug.
Usage: python3 scripts/check-doc-links.py [root]"""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else "."
def slug(h):
    h = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', h)   # link text
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)                   # \w keeps unicode letters, _
    return h.replace(' ', '-')
def anchors(path):
    seen, out, fence = {}, set(), False
    for line in open(path, encoding='utf-8'):
        if line.lstrip().startswith('```'):
            fence = not fence; continue
        if fence: continue
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if not m: continue
        s = slug(m.group(2))
        n = seen.get(s, 0); seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out
files = []
for d, _, fs in os.walk(root):
    if '.git' in d or 'node_modules' in d: continue
    files += [os.path.join(d, f) for f in fs if f.endswith('.md') and 'results' not in d]
bad = 0; count = 0
for f in sorted(files):
    text = open(f, encoding='utf-8').read()
    text_nf = re.sub(r'```.*?```', '', text, flags=re.S)
    for m in re.finditer(r'\]\(([^)\s]+)\)', text_nf):
        target = m.group(1)
        if re.match(r'^[a-z]+:', target): continue
        count += 1
        p, _, a = target.partition('#')
        tf = os.path.normpath(os.path.join(os.path.dirname(f), p)) if p else f
        if not os.path.exists(tf):
            print(f'{os.path.relpath(f, root)}: missing file {target}'); bad += 1; continue
        if a and tf.endswith('.md') and a not in anchors(tf):
            print(f'{os.path.relpath(f, root)}: missing anchor {target}'); bad += 1
print(f'{count} relative links checked, {bad} broken')
sys.exit(1 if bad else 0)

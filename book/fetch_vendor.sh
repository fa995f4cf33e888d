#!/usr/bin/env bash
# Fetch the ipywidgets renderer (html-manager) and require.js from the npm registry into $1,
# so that widget pages render offline. Versions are the ones myst-nb 1.4 loads from its CDN.
set -euo pipefail
dest=${1:-book/_vendor}
rm -rf "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"
( cd "$tmp" && npm pack --silent @jupyter-widgets/html-manager@1.0.6 requirejs@2.3.8 >/dev/null )
tar xzf "$tmp"/jupyter-widgets-html-manager-1.0.6.tgz -C "$tmp"
mkdir -p "$dest/static"
cp "$tmp"/package/dist/*.js "$tmp"/package/dist/*.txt "$dest/static"/
# embed-amd.js loads its icon fonts relative to the page, from @jupyter-widgets/html-manager/dist/;
# widget pages are the chapters in notebooks/, so the fonts go there too (via html_extra_path).
fonts="$dest/extra/notebooks/@jupyter-widgets/html-manager/dist"
mkdir -p "$fonts"
cp "$tmp"/package/dist/*.woff* "$tmp"/package/dist/*.ttf "$tmp"/package/dist/*.eot "$tmp"/package/dist/*.svg "$fonts"/
rm -rf "$tmp"/package
tar xzf "$tmp"/requirejs-2.3.8.tgz -C "$tmp"
cp "$tmp"/package/require.js "$dest/static/require.js"
rm -f "$dest"/static/*.map
echo "widget JS in $dest: $(find "$dest" -type f | wc -l) files"

#!/bin/sh
# The real apps' sources, from their public repositories at the commits bench/bench_apps.py
# measures: docsify's own documentation (its v4.13.1 release, docs/) and AngularJS PhoneCat
# (the tutorial's last step, app/). Their libraries come from npm (package.json here).
# GIT_MIRROR=DIR clones DIR/<owner>+<name>/repo instead of https://github.com/<owner>/<name>.
set -e
cd "$(dirname "$0")"
get() {  # owner name commit directory
    if [ -d "$4/.git" ] && git -C "$4" cat-file -e "$3^{commit}" 2>/dev/null; then
        git -C "$4" checkout -q "$3"
        return
    fi
    url="https://github.com/$1/$2"
    [ -n "$GIT_MIRROR" ] && url="$GIT_MIRROR/$1+$2/repo"
    rm -rf "$4"
    git clone -q --no-checkout "$url" "$4"
    git -C "$4" checkout -q "$3"
}
get docsifyjs docsify 862b10053879386a48ab34c21d7ca648483be738 checkouts/docsify
get angular angular-phonecat ef6f6eb672ded472b4e442d598f5df40d0e0642c checkouts/phonecat

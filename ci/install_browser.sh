#!/usr/bin/env bash
# What the report's tests look with: Debian's Chromium and ChromeDriver (a
# real browser, driven by selenium), and the trace engine of Chrome DevTools
# from npm (a real parser of the timelines' trace-event files). Each is
# installed if missing and if this machine can (root and apt-get; node and
# npm); where it cannot, say so: the tests that need it skip with the reason.
set -u
cd "$(dirname "$0")/.."
if ! { command -v chromium && command -v chromedriver; } >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; } ||
            echo "install_browser: could not install chromium and chromium-driver: the browser tests will skip"
    else
        echo "install_browser: no chromium, and no root apt-get to install it: the browser tests will skip"
    fi
fi
if command -v npm >/dev/null 2>&1; then
    (cd tests/js && npm ci --silent --no-audit --no-fund >/dev/null 2>&1) ||
        echo "install_browser: npm ci in tests/js failed: the trace-parser tests will skip"
else
    echo "install_browser: no node/npm: the trace-parser tests will skip"
fi
exit 0

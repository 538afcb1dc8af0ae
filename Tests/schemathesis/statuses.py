"""Prints, for every operation of the OpenAPI document, the statuses a schemathesis run got, from its HAR report.

It is what shows whether the run reached each operation (a 2xx) or only ever got refusals.

    python3 statuses.py OPENAPI_JSON REQUESTS_HAR
"""

import collections
import json
import re
import sys
import urllib.parse

document = json.load(open(sys.argv[1]))
har = json.load(open(sys.argv[2]))

operations = []
for path, item in document["paths"].items():
    segments = ("[^/]+" if part.startswith("{") else re.escape(part) for part in path.split("/"))
    pattern = re.compile("^" + "/".join(segments) + "$")
    for method in item:
        operations.append((method.upper(), path, pattern))
# Literal segments win over parameters (/chats/nearby before /chats/{chatId}), as in the router.
operations.sort(key=lambda operation: operation[1].count("{"))

statuses = collections.defaultdict(collections.Counter)
for entry in har["log"]["entries"]:
    method = entry["request"]["method"]
    path = urllib.parse.urlsplit(entry["request"]["url"]).path
    for candidate, template, pattern in operations:
        if candidate == method and pattern.match(path):
            statuses[(method, template)][entry["response"]["status"]] += 1
            break

for method, template, _ in sorted(operations, key=lambda operation: (operation[1], operation[0])):
    counts = statuses.get((method, template), {})
    reached = "2xx" if any(200 <= status < 300 for status in counts) else "---"
    text = " ".join(f"{status}x{count}" for status, count in sorted(counts.items()))
    print(f"{reached}  {method} {template}: {text or 'not called'}")

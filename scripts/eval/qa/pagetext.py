"""The visible text of an HTML page, for the question-set scripts' evidence checks.

Text of the ``<body>`` with the tags removed and ``<script>``/``<style>`` dropped; a separator
stands where a tag was (every tag, or only the block tags given), so words never run together
across a tag boundary.
"""

from __future__ import annotations

import html.parser


class _BodyText(html.parser.HTMLParser):
    def __init__(self, block_tags: set[str] | None, separator: str) -> None:
        super().__init__(convert_charrefs=True)
        self.block_tags = block_tags
        self.separator = separator
        self.parts: list[str] = []
        self.in_body = False
        self.skip = 0

    def _boundary(self, tag: str) -> None:
        if self.block_tags is None or tag in self.block_tags:
            self.parts.append(self.separator)

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.in_body = True
        elif tag in ("script", "style"):
            self.skip += 1
        self._boundary(tag)

    def handle_startendtag(self, tag, attrs):
        self._boundary(tag)

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        elif tag == "body":
            self.in_body = False
        self._boundary(tag)

    def handle_data(self, data):
        if self.in_body and not self.skip:
            self.parts.append(data)


def visible_text(markup: str, block_tags: set[str] | None = None, separator: str = " ") -> str:
    """The body's text of ``markup``, ``separator`` at every tag (or every tag in ``block_tags``)."""
    parser = _BodyText(block_tags, separator)
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)

"""Scripts the browser env runs in the task page (through ``browser_evaluate``, calls the agent never sees)."""

from __future__ import annotations

# Elements the page made clickable without an interactive role (MiniWoB++ binds d3, jQuery or inline handlers to
# spans and divs, e.g. click-link's words) are folded into their parent's text by the accessibility snapshot and
# get no ref. Give each such element a role (a link when it looks like one, else a button) so the snapshot lists
# it with a ref the tools accept. Clickable: an inline/property onclick, a d3 listener (__onclick...), a jQuery
# click handler, or the outermost element whose computed cursor is a pointer.
NAME_CLICKABLE_JS = """() => {
  const INTERACTIVE = new Set(['A', 'BUTTON', 'INPUT', 'SELECT', 'TEXTAREA', 'OPTION', 'LABEL', 'SUMMARY']);
  const jq = window.jQuery && window.jQuery._data;
  const handled = (el) => {
    if (el.onclick || el.onmousedown || el.onmouseup || el.ondblclick) return true;
    for (const k of ['__onclick', '__onmousedown', '__onmouseup', '__ondblclick']) if (el[k]) return true;
    const ev = jq ? window.jQuery._data(el, 'events') : null;
    return !!(ev && (ev.click || ev.mousedown || ev.mouseup || ev.dblclick));
  };
  const pointer = (el) => getComputedStyle(el).cursor === 'pointer';
  const root = document.getElementById('wrap') || document.body;
  let named = 0;
  for (const el of root.querySelectorAll('*')) {
    if (el.hasAttribute('role') || INTERACTIVE.has(el.tagName) && (el.tagName !== 'A' || el.hasAttribute('href')))
      continue;
    if (!el.getClientRects().length) continue;
    const parent = el.parentElement;
    const clickable = handled(el) || (pointer(el) && !(parent && pointer(parent)));
    if (!clickable) continue;
    const looksLikeLink = el.tagName === 'A' || el.classList.contains('alink') ||
      getComputedStyle(el).textDecorationLine.includes('underline');
    el.setAttribute('role', looksLikeLink ? 'link' : 'button');
    named++;
  }
  return {named};
}"""

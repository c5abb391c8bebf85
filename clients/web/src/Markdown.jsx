// GitHub-flavoured Markdown for assistant answers, plan bodies and user messages: markdown-it
// with raw HTML off (any `<tag>` shows as text), links limited to http(s), mailto and relative
// URLs (a `javascript:` or `data:` link stays plain text) and opened in a new tab, images shown as
// links to them, and code blocks highlighted by highlight.js (a few common languages) with a copy
// button. The text is rendered block by block, each block memoized, so that while an answer
// streams only its last block changes: the blocks above keep their DOM (no flicker, a selection
// in them survives).
import MarkdownIt from 'markdown-it';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import ini from 'highlight.js/lib/languages/ini';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';
import { memo, useMemo } from 'react';

for (const [name, language] of Object.entries({ bash, css, diff, go, ini, javascript, json, python, rust, sql, typescript, xml, yaml })) {
  hljs.registerLanguage(name, language);
}
hljs.registerAliases(['shell', 'console', 'zsh'], { languageName: 'bash' });
hljs.registerAliases(['toml'], { languageName: 'ini' });

const md = new MarkdownIt({ html: false, linkify: true, typographer: false });

// Only these schemes may be followed; a URL without a scheme is relative to the page.
const SAFE_SCHEME = /^(https?|mailto):/;
md.validateLink = (url) => {
  const lowered = url.trim().toLowerCase();
  return !/^[a-z][a-z0-9+.-]*:/.test(lowered) || SAFE_SCHEME.test(lowered);
};

export function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (char) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[char]);
}

function highlighted(code, language) {
  if (language && hljs.getLanguage(language)) {
    return hljs.highlight(code, { language, ignoreIllegals: true }).value;
  }
  return escapeHtml(code);
}

function codeBlock(code, language) {
  const name = escapeHtml(language);
  return (
    `<div class="code-block"><div class="code-head"><span class="code-lang">${name}</span>` +
    '<button type="button" class="copy" aria-label="Copy code">Copy</button></div>' +
    `<pre><code class="hljs${language ? ` language-${name}` : ''}">${highlighted(code, language)}</code></pre></div>`
  );
}

md.renderer.rules.fence = (tokens, index) => {
  const token = tokens[index];
  return codeBlock(token.content, md.utils.unescapeAll(token.info).trim().split(/\s+/)[0] ?? '');
};
md.renderer.rules.code_block = (tokens, index) => codeBlock(tokens[index].content, '');

const defaultLinkOpen = md.renderer.rules.link_open ?? ((tokens, index, options, env, self) => self.renderToken(tokens, index, options));
md.renderer.rules.link_open = (tokens, index, options, env, self) => {
  tokens[index].attrSet('target', '_blank');
  tokens[index].attrSet('rel', 'noopener noreferrer');
  return defaultLinkOpen(tokens, index, options, env, self);
};

// The page's policy loads no image from elsewhere: an image is a link to it, named by its text.
md.renderer.rules.image = (tokens, index, options, env, self) => {
  const token = tokens[index];
  const alt = self.renderInlineAsText(token.children ?? [], options, env) || 'image';
  return `<a href="${escapeHtml(token.attrGet('src'))}" target="_blank" rel="noopener noreferrer">[image: ${escapeHtml(alt)}]</a>`;
};

// The HTML of each top-level block of `text`, parsed once (so link references resolve across
// blocks). `breaks` turns single newlines into line breaks (messages people typed).
export function renderBlocks(text, breaks = false) {
  const env = {};
  const tokens = md.parse(text, env);
  const options = { ...md.options, breaks };
  const blocks = [];
  let current = [];
  for (const token of tokens) {
    current.push(token);
    if (token.level === 0 && token.nesting !== 1) {
      blocks.push(md.renderer.render(current, options, env));
      current = [];
    }
  }
  if (current.length) blocks.push(md.renderer.render(current, options, env));
  return blocks;
}

// React sets the HTML only when a block's HTML changed.
const Block = memo(function Block({ html }) {
  return <div className="md-block" dangerouslySetInnerHTML={{ __html: html }} />;
});

// The copy buttons of the code blocks: the code's text goes to the clipboard.
async function copyCode(event) {
  const button = event.target.closest?.('button.copy');
  if (!button) return;
  const code = button.closest('.code-block')?.querySelector('code')?.textContent ?? '';
  try {
    await navigator.clipboard.writeText(code);
    button.textContent = 'Copied';
  } catch {
    button.textContent = 'Copy failed';
  }
  setTimeout(() => {
    button.textContent = 'Copy';
  }, 1500);
}

export function Markdown({ text, className = '', breaks = false }) {
  const blocks = useMemo(() => renderBlocks(text ?? '', breaks), [text, breaks]);
  return (
    // The clicks handled are those of the copy buttons inside (buttons, so keyboards reach them).
    <div className={`markdown ${className}`} onClick={copyCode}>
      {blocks.map((html, index) => <Block key={index} html={html} />)}
    </div>
  );
}

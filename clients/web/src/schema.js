// A small JSON Schema checker for the agent editor, run as the user types, against the manifest
// schema the server publishes (`GET /api/v1/schemas/agent-manifest.json`): references, one-of and
// any-of, types, enums, required keys and keys the schema does not have (with the known key the
// user likely meant). It reports where, as a dotted path (`config.sandbox.enabld`); the server
// stays the judge when saving.

const TYPES = {
  null: (value) => value === null,
  boolean: (value) => typeof value === 'boolean',
  string: (value) => typeof value === 'string',
  integer: (value) => Number.isInteger(value),
  number: (value) => typeof value === 'number',
  array: (value) => Array.isArray(value),
  object: (value) => value !== null && typeof value === 'object' && !Array.isArray(value),
};

function distance(a, b) {
  const row = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i += 1) {
    let previous = row[0];
    row[0] = i;
    for (let j = 1; j <= b.length; j += 1) {
      const kept = row[j];
      row[j] = Math.min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] === b[j - 1] ? 0 : 1));
      previous = kept;
    }
  }
  return row[b.length];
}

// The known key closest to `key`, when it is close enough to be a typo of it.
export function closest(key, known) {
  let best = null;
  for (const candidate of known) {
    const score = distance(key.toLowerCase(), candidate.toLowerCase());
    if (score <= Math.max(2, Math.floor(candidate.length / 3)) && (!best || score < best.score)) best = { candidate, score };
  }
  return best?.candidate ?? null;
}

function resolve(schema, root) {
  let current = schema;
  for (let depth = 0; current?.$ref && depth < 20; depth += 1) {
    const path = current.$ref.replace(/^#\//, '').split('/');
    current = path.reduce((node, part) => node?.[part], root);
  }
  return current ?? {};
}

function join(path, key) {
  return typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key;
}

function typeNames(schema) {
  if (schema.type === undefined) return null;
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

function describe(types) {
  return types.join(' or ');
}

// The problems of `value` against `schema`: `[{param, message}]`, none when it conforms.
export function validate(value, schema, root = schema, path = '') {
  const node = resolve(schema, root);
  const problems = [];
  for (const part of node.allOf ?? []) problems.push(...validate(value, part, root, path));
  const branches = node.oneOf ?? node.anyOf;
  if (branches) {
    let best = null;
    for (const branch of branches) {
      const found = validate(value, branch, root, path);
      if (found.length === 0) {
        best = [];
        break;
      }
      // A branch of the value's own type says more than one of another type.
      const typed = typeNames(resolve(branch, root));
      const fits = !typed || typed.some((type) => TYPES[type]?.(value));
      const rank = found.length + (fits ? 0 : 1000);
      if (!best || rank < best.rank) best = Object.assign(found, { rank });
    }
    problems.push(...(best ?? []));
  }
  const types = typeNames(node);
  if (types && !types.some((type) => TYPES[type]?.(value))) {
    problems.push({ param: path, message: `must be ${describe(types)}` });
    return problems;
  }
  if (node.enum && !node.enum.some((item) => JSON.stringify(item) === JSON.stringify(value))) {
    problems.push({ param: path, message: `must be one of ${node.enum.map((item) => JSON.stringify(item)).join(', ')}` });
  }
  if (node.const !== undefined && JSON.stringify(node.const) !== JSON.stringify(value)) {
    problems.push({ param: path, message: `must be ${JSON.stringify(node.const)}` });
  }
  if (TYPES.object(value)) {
    const properties = node.properties ?? {};
    for (const key of node.required ?? []) {
      if (!(key in value)) problems.push({ param: join(path, key), message: 'is required' });
    }
    for (const [key, item] of Object.entries(value)) {
      if (key in properties) {
        problems.push(...validate(item, properties[key], root, join(path, key)));
      } else if (node.additionalProperties === false) {
        const meant = closest(key, Object.keys(properties));
        problems.push({ param: join(path, key), message: meant ? `is not a key here: did you mean ${meant}?` : `is not a key here (known: ${Object.keys(properties).join(', ')})` });
      } else if (node.additionalProperties && typeof node.additionalProperties === 'object') {
        problems.push(...validate(item, node.additionalProperties, root, join(path, key)));
      }
    }
  }
  if (Array.isArray(value) && node.items && typeof node.items === 'object') {
    value.forEach((item, index) => problems.push(...validate(item, node.items, root, join(path, index))));
  }
  return problems;
}

// The keys an object at `path` (keys from the top, array items skipped) may have, with their
// descriptions: what the editor offers to complete.
export function keysAt(schema, path, root = schema) {
  let node = resolve(schema, root);
  const objectOf = (candidate) => {
    const resolved = resolve(candidate, root);
    if (resolved.properties) return resolved;
    for (const branch of resolved.oneOf ?? resolved.anyOf ?? resolved.allOf ?? []) {
      const found = objectOf(branch);
      if (found) return found;
    }
    if (resolved.items) return objectOf(resolved.items);
    return null;
  };
  for (const key of path) {
    const object = objectOf(node);
    node = object?.properties?.[key];
    if (!node) return [];
  }
  const object = objectOf(node);
  return Object.entries(object?.properties ?? {}).map(([key, value]) => ({ key, description: resolve(value, root).description ?? value.description ?? '' }));
}

// Where the cursor of a YAML text is, for completion: the keys above it (array items skipped)
// and the partial key typed on its line, or null when the line is not a key being typed.
export function yamlCursor(text, offset) {
  const before = text.slice(0, offset);
  const lines = before.split('\n');
  const line = lines.at(-1);
  const typing = /^(\s*)(- )?([A-Za-z_][\w-]*)?$/.exec(line);
  if (!typing) return null;
  let indent = typing[1].length + (typing[2] ? 2 : 0);
  const path = [];
  for (let index = lines.length - 2; index >= 0 && indent > 0; index -= 1) {
    const opener = /^(\s*)(- )?([A-Za-z_][\w-]*):\s*(#.*)?$/.exec(lines[index]);
    const keyed = /^(\s*)(- )?/.exec(lines[index]);
    const keyIndent = keyed[1].length + (keyed[2] ? 2 : 0);
    if (!lines[index].trim() || keyIndent >= indent) continue;
    if (!opener) return null;
    path.unshift(opener[3]);
    indent = opener[1].length;
  }
  return { path, partial: typing[3] ?? '', start: offset - (typing[3] ?? '').length };
}

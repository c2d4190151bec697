/*
 * Quiver dashboard: plain JavaScript, no build step, nothing loaded from elsewhere.
 *
 * Views, by hash route:
 *   #/                   the collections (GET /collections)
 *   #/collections/<name> one collection (GET /collections/<name>) and a query against it
 *                        (POST /collections/<name>/points/query)
 *   #/jwt                a JWT generator: HS256 tokens signed in this browser with the API key
 *
 * The API key is kept in sessionStorage (this tab only) and sent as the `api-key` header
 * with every API call.
 */
'use strict';

(function () {
  var KEY_STORAGE = 'quiver.dashboard.apiKey';

  /** Where the API lives: this page is <prefix>/dashboard/, the API is <prefix>/. */
  var API_BASE = location.pathname.replace(/\/dashboard(\/.*)?$/, '');

  function $(id) {
    return document.getElementById(id);
  }

  // ---------------------------------------------------------------- API key

  function apiKey() {
    try {
      return sessionStorage.getItem(KEY_STORAGE) || '';
    } catch (e) {
      return memoryKey;
    }
  }
  var memoryKey = '';

  function setApiKey(value) {
    memoryKey = value;
    try {
      if (value) sessionStorage.setItem(KEY_STORAGE, value);
      else sessionStorage.removeItem(KEY_STORAGE);
    } catch (e) {
      /* storage disabled: the key lives in memory until the page is closed */
    }
  }

  // ---------------------------------------------------------------- API calls

  function ApiError(status, message) {
    this.name = 'ApiError';
    this.status = status;
    this.message = message;
  }
  ApiError.prototype = Object.create(Error.prototype);

  /** Calls the API with the api-key header; resolves with `result`, rejects with an ApiError. */
  function api(method, path, body) {
    var headers = { accept: 'application/json' };
    var key = apiKey();
    if (key) headers['api-key'] = key;
    var init = { method: method, headers: headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    return fetch(API_BASE + path, init).then(
      function (res) {
        return res.text().then(function (text) {
          var json = null;
          try {
            json = text ? JSON.parse(text) : null;
          } catch (e) {
            json = null;
          }
          if (!res.ok) throw new ApiError(res.status, describeFailure(res, json, text));
          return json && typeof json === 'object' && 'result' in json ? json.result : json;
        });
      },
      function (err) {
        throw new ApiError(0, 'Network error: ' + (err && err.message ? err.message : String(err)));
      },
    );
  }

  function describeFailure(res, json, text) {
    var detail = '';
    if (json && json.status && typeof json.status === 'object' && json.status.error) detail = json.status.error;
    else if (text) detail = text.slice(0, 300);
    var head = res.status + ' ' + (res.statusText || '');
    if (res.status === 401) head += ' - enter a valid API key (or a JWT) above';
    if (res.status === 403) head += ' - this key may not do that';
    return detail ? head + ': ' + detail : head;
  }

  // ---------------------------------------------------------------- small helpers

  function showStatus(message, kind) {
    var el = $('status');
    if (!message) {
      el.hidden = true;
      el.textContent = '';
      return;
    }
    el.className = kind || '';
    el.textContent = message;
    el.hidden = false;
  }

  function setText(id, text) {
    var el = $(id);
    el.textContent = text || '';
    el.hidden = !text;
  }

  function element(tag, attrs, text) {
    var el = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (name) {
        el.setAttribute(name, attrs[name]);
      });
    }
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function collectionHash(name) {
    return '#/collections/' + encodeURIComponent(name);
  }

  // ---------------------------------------------------------------- router

  var VIEWS = ['view-collections', 'view-collection', 'view-jwt', 'view-not-found'];
  /** Bumped on every navigation, so answers for a page left meanwhile are dropped. */
  var generation = 0;

  function route() {
    generation += 1;
    showStatus('');
    var hash = location.hash.replace(/^#/, '') || '/';
    var m = /^\/collections\/(.+)$/.exec(hash);
    var name = null;
    if (m) {
      try {
        name = decodeURIComponent(m[1]);
      } catch (e) {
        name = null;
      }
    }
    if (hash === '/' || hash === '') show('view-collections', 'nav-collections', loadCollections);
    else if (name !== null) {
      show('view-collection', 'nav-collections', function () {
        openCollection(name);
      });
    } else if (hash === '/jwt') show('view-jwt', 'nav-jwt', openJwt);
    else show('view-not-found', null, null);
  }

  function show(viewId, navId, load) {
    VIEWS.forEach(function (id) {
      $(id).hidden = id !== viewId;
    });
    ['nav-collections', 'nav-jwt'].forEach(function (id) {
      $(id).classList.toggle('active', id === navId);
    });
    if (load) load();
  }

  // ---------------------------------------------------------------- #/ collections

  var knownCollections = [];

  function loadCollections() {
    var mine = generation;
    var list = $('collections-list');
    $('collections-empty').hidden = true;
    // The state marker describes this load only: a previous load's answer must not pass
    // for this one's (tests and assistive tools wait on it).
    list.removeAttribute('data-loaded');
    list.setAttribute('aria-busy', 'true');
    return api('GET', '/collections').then(
      function (result) {
        if (mine !== generation) return;
        list.removeAttribute('aria-busy');
        var names = ((result && result.collections) || [])
          .map(function (c) {
            return c.name;
          })
          .sort();
        rememberCollections(names);
        list.textContent = '';
        names.forEach(function (name) {
          var li = element('li', { 'data-testid': 'collection-item', 'data-name': name });
          li.appendChild(element('a', { href: collectionHash(name), 'data-testid': 'collection-link', 'data-name': name }, name));
          list.appendChild(li);
        });
        $('collections-empty').hidden = names.length > 0;
        list.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        list.removeAttribute('aria-busy');
        list.textContent = '';
        list.setAttribute('data-loaded', 'error');
        showStatus('Could not list the collections: ' + err.message);
      },
    );
  }

  function rememberCollections(names) {
    knownCollections = names.slice();
    var datalist = $('jwt-known-collections');
    datalist.textContent = '';
    names.forEach(function (name) {
      datalist.appendChild(element('option', { value: name }));
    });
  }

  // ---------------------------------------------------------------- #/collections/<name>

  var currentCollection = null;

  function openCollection(name) {
    if (currentCollection !== name) {
      currentCollection = name;
      $('query-vector').value = '';
      $('query-using').value = '';
      clearQueryResults();
    }
    $('collection-name').textContent = name;
    loadCollection();
  }

  function loadCollection() {
    var mine = generation;
    var name = currentCollection;
    var summary = $('collection-summary');
    summary.textContent = '';
    $('collection-info').textContent = '';
    summary.setAttribute('data-loaded', 'false');
    return api('GET', '/collections/' + encodeURIComponent(name)).then(
      function (info) {
        if (mine !== generation) return;
        renderSummary(info || {});
        $('collection-info').textContent = JSON.stringify(info, null, 2);
        summary.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        summary.setAttribute('data-loaded', 'error');
        showStatus('Could not read collection ' + name + ': ' + err.message);
      },
    );
  }

  function renderSummary(info) {
    var summary = $('collection-summary');
    var vectors = (info.config && info.config.params && info.config.params.vectors) || null;
    var rows = [
      ['status', info.status],
      ['points', info.points_count],
      ['indexed vectors', info.indexed_vectors_count],
      ['segments', info.segments_count],
      ['vectors', describeVectors(vectors)],
    ];
    rows.forEach(function (row) {
      if (row[1] === undefined || row[1] === null) return;
      var key = row[0].replace(/ /g, '-');
      summary.appendChild(element('dt', null, row[0]));
      summary.appendChild(element('dd', { 'data-testid': 'summary-' + key }, String(row[1])));
    });
    // A hint for the query box: the size of the default vector, or the names to pick from.
    var vectorInput = $('query-vector');
    var usingInput = $('query-using');
    if (vectors && typeof vectors.size === 'number') {
      vectorInput.placeholder = 'JSON array of ' + vectors.size + ' numbers';
      usingInput.placeholder = 'default vector';
    } else if (vectors && typeof vectors === 'object') {
      var names = Object.keys(vectors);
      vectorInput.placeholder = '[0.1, 0.2, ...]';
      usingInput.placeholder = names.length ? 'one of: ' + names.join(', ') : 'default vector';
    }
  }

  function describeVectors(vectors) {
    if (!vectors || typeof vectors !== 'object') return null;
    if (typeof vectors.size === 'number') return vectors.size + ' dims, ' + vectors.distance;
    var names = Object.keys(vectors);
    if (names.length === 0) return 'none';
    return names
      .map(function (n) {
        var v = vectors[n] || {};
        return n + ': ' + v.size + ' dims, ' + v.distance;
      })
      .join('; ');
  }

  function clearQueryResults() {
    setText('query-error', '');
    setText('query-count', '');
    $('query-results').hidden = true;
    $('query-results-body').textContent = '';
  }

  function runQuery(event) {
    event.preventDefault();
    clearQueryResults();
    var name = currentCollection;
    var query;
    var text = $('query-vector').value.trim();
    if (!text) return setText('query-error', 'Enter a vector: a JSON array of numbers.');
    try {
      query = JSON.parse(text);
    } catch (e) {
      return setText('query-error', 'The vector is not valid JSON: ' + e.message);
    }
    if (Array.isArray(query) && !query.every(isNumberOrNumbers)) {
      return setText('query-error', 'The vector must hold numbers only.');
    }
    var limit = Number($('query-limit').value || '10');
    if (!Number.isInteger(limit) || limit < 1) return setText('query-error', 'The limit must be a positive whole number.');
    var body = { query: query, limit: limit, with_payload: $('query-with-payload').checked };
    var using = $('query-using').value.trim();
    if (using) body.using = using;

    var mine = generation;
    var button = $('query-run');
    button.disabled = true;
    var results = $('query-results');
    results.setAttribute('data-state', 'running');
    return api('POST', '/collections/' + encodeURIComponent(name) + '/points/query', body)
      .then(
        function (result) {
          if (mine !== generation) return;
          renderResults((result && result.points) || []);
          results.setAttribute('data-state', 'done');
        },
        function (err) {
          if (mine !== generation) return;
          results.setAttribute('data-state', 'error');
          setText('query-error', 'Query failed: ' + err.message);
        },
      )
      .then(function () {
        button.disabled = false;
      });
  }

  function isNumberOrNumbers(v) {
    if (typeof v === 'number') return Number.isFinite(v);
    return Array.isArray(v) && v.every(function (x) {
      return typeof x === 'number' && Number.isFinite(x);
    });
  }

  function renderResults(points) {
    var body = $('query-results-body');
    body.textContent = '';
    points.forEach(function (p, i) {
      var tr = element('tr', { 'data-testid': 'query-result', 'data-id': String(p.id), 'data-score': String(p.score) });
      tr.appendChild(element('td', null, String(i + 1)));
      tr.appendChild(element('td', { 'data-testid': 'result-id' }, String(p.id)));
      tr.appendChild(element('td', { 'data-testid': 'result-score' }, typeof p.score === 'number' ? formatScore(p.score) : ''));
      var payload = p.payload === undefined || p.payload === null ? '' : JSON.stringify(p.payload);
      tr.appendChild(element('td', { class: 'payload', 'data-testid': 'result-payload' }, payload));
      body.appendChild(tr);
    });
    setText('query-count', points.length + (points.length === 1 ? ' point' : ' points'));
    $('query-results').hidden = points.length === 0;
  }

  function formatScore(score) {
    return Number.isInteger(score) ? String(score) : String(Number(score.toPrecision(6)));
  }

  // ---------------------------------------------------------------- #/jwt

  function openJwt() {
    if (knownCollections.length === 0 && apiKey()) {
      // Only to offer names in the form; a failure here is not worth a message.
      api('GET', '/collections').then(
        function (result) {
          rememberCollections(
            ((result && result.collections) || []).map(function (c) {
              return c.name;
            }),
          );
        },
        function () {},
      );
    }
    syncJwtForm();
  }

  function accessMode() {
    var checked = document.querySelector('input[name="jwt-access"]:checked');
    return checked ? checked.value : 'r';
  }

  /** Shows the parts of the form the choices call for, with one empty row where a list is empty. */
  function syncJwtForm() {
    var perCollection = accessMode() === 'collections';
    $('jwt-collections').hidden = !perCollection;
    if (perCollection && $('jwt-collection-rows').children.length === 0) addCollectionRow();
    var ve = $('jwt-ve-enabled').checked;
    $('jwt-ve').hidden = !ve;
    if (ve && $('jwt-ve-matches').children.length === 0) addMatchRow();
  }

  function addCollectionRow() {
    var row = $('tpl-collection-row').content.firstElementChild.cloneNode(true);
    row.querySelector('.jwt-row-remove').addEventListener('click', function () {
      row.remove();
    });
    $('jwt-collection-rows').appendChild(row);
    return row;
  }

  function addMatchRow() {
    var row = $('tpl-match-row').content.firstElementChild.cloneNode(true);
    row.querySelector('.jwt-ve-remove').addEventListener('click', function () {
      row.remove();
    });
    $('jwt-ve-matches').appendChild(row);
    return row;
  }

  /** A match value: a JSON number, boolean or quoted string when it reads as one, else the text itself. */
  function matchValue(text) {
    var t = text.trim();
    if (/^(true|false)$/.test(t) || /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(t) || /^".*"$/.test(t)) {
      try {
        return JSON.parse(t);
      } catch (e) {
        /* not JSON after all */
      }
    }
    return text;
  }

  /** The claims the form describes; throws an Error with a message for the user. */
  function claimsFromForm(nowSeconds) {
    var claims = {};
    var mode = accessMode();
    if (mode === 'm' || mode === 'r') claims.access = mode;
    else {
      var rows = Array.prototype.slice.call($('jwt-collection-rows').children);
      var access = rows.map(function (row) {
        var collection = row.querySelector('.jwt-row-collection').value.trim();
        if (!collection) throw new Error('Every collection row needs a collection name.');
        return { collection: collection, access: row.querySelector('.jwt-row-access').value };
      });
      if (access.length === 0) throw new Error('Add at least one collection, or choose global access.');
      claims.access = access;
    }

    var amountText = $('jwt-exp-amount').value.trim();
    if (amountText) {
      var amount = Number(amountText);
      if (!Number.isFinite(amount) || amount <= 0) throw new Error('The expiry must be a positive number.');
      var unit = $('jwt-exp-unit').value === 'minutes' ? 60 : 3600;
      claims.exp = nowSeconds + Math.round(amount * unit);
    }

    var sub = $('jwt-sub').value.trim();
    if (sub) claims.sub = sub;

    if ($('jwt-ve-enabled').checked) {
      var veCollection = $('jwt-ve-collection').value.trim();
      if (!veCollection) throw new Error('value_exists needs a collection.');
      var matches = Array.prototype.slice.call($('jwt-ve-matches').children).map(function (row) {
        var key = row.querySelector('.jwt-ve-key').value.trim();
        if (!key) throw new Error('Every value_exists match needs a payload key.');
        return { key: key, value: matchValue(row.querySelector('.jwt-ve-value').value) };
      });
      if (matches.length === 0) throw new Error('value_exists needs at least one match.');
      claims.value_exists = { collection: veCollection, matches: matches };
    }
    return claims;
  }

  function generateToken(event) {
    event.preventDefault();
    setText('jwt-error', '');
    var key = apiKey();
    if (!key) return setText('jwt-error', 'Enter the API key above: tokens are signed with it.');
    if (looksLikeJwt(key)) {
      return setText('jwt-error', 'The key field holds a JWT; tokens must be signed with the API key itself.');
    }
    var claims;
    try {
      claims = claimsFromForm(Math.floor(Date.now() / 1000));
    } catch (e) {
      return setText('jwt-error', e.message);
    }
    var output = $('jwt-output');
    output.setAttribute('data-state', 'signing');
    return signJwt(claims, key).then(
      function (token) {
        $('jwt-token').value = token;
        $('jwt-claims').textContent = JSON.stringify(claims, null, 2);
        $('jwt-expiry').textContent =
          claims.exp === undefined ? 'Never expires.' : 'Expires at ' + new Date(claims.exp * 1000).toISOString() + '.';
        $('jwt-copy-status').textContent = '';
        output.hidden = false;
        output.setAttribute('data-state', 'ready');
      },
      function (err) {
        output.setAttribute('data-state', 'error');
        setText('jwt-error', 'Could not sign the token: ' + (err && err.message ? err.message : String(err)));
      },
    );
  }

  function looksLikeJwt(text) {
    return /^eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(text);
  }

  function copyToken() {
    var token = $('jwt-token').value;
    var status = $('jwt-copy-status');
    var fallback = function () {
      var area = $('jwt-token');
      area.focus();
      area.select();
      var done = false;
      try {
        done = document.execCommand('copy');
      } catch (e) {
        done = false;
      }
      status.textContent = done ? 'Copied.' : 'Select the token and copy it (no clipboard access here).';
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(token).then(function () {
        status.textContent = 'Copied.';
      }, fallback);
    } else fallback();
  }

  // ---------------------------------------------------------------- JWT signing

  var encoder = new TextEncoder();

  function base64url(bytes) {
    var binary = '';
    for (var i = 0; i < bytes.length; i += 1) binary += String.fromCharCode(bytes[i]);
    return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  /** `header.claims.signature`, HS256 with the key's UTF-8 bytes. */
  function signJwt(claims, key) {
    var input =
      base64url(encoder.encode(JSON.stringify({ alg: 'HS256', typ: 'JWT' }))) +
      '.' +
      base64url(encoder.encode(JSON.stringify(claims)));
    return hmacSha256(encoder.encode(key), encoder.encode(input)).then(function (mac) {
      return input + '.' + base64url(mac);
    });
  }

  /**
   * HMAC-SHA256 with WebCrypto. Browsers offer crypto.subtle only in secure contexts
   * (https, or http to localhost); a dashboard opened over plain http from another host
   * falls back to the small implementation below.
   */
  function hmacSha256(keyBytes, messageBytes) {
    var subtle = window.crypto && window.crypto.subtle;
    if (!subtle) return Promise.resolve(hmacSha256Js(keyBytes, messageBytes));
    return subtle
      .importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'])
      .then(function (cryptoKey) {
        return subtle.sign('HMAC', cryptoKey, messageBytes);
      })
      .then(function (signature) {
        return new Uint8Array(signature);
      });
  }

  var K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);

  function rotr(x, n) {
    return (x >>> n) | (x << (32 - n));
  }

  /** SHA-256 of a byte array (FIPS 180-4). */
  function sha256(bytes) {
    var length = bytes.length;
    var padded = (((length + 9 + 63) / 64) | 0) * 64;
    var m = new Uint8Array(padded);
    m.set(bytes);
    m[length] = 0x80;
    var view = new DataView(m.buffer);
    view.setUint32(padded - 8, Math.floor(length / 0x20000000));
    view.setUint32(padded - 4, (length * 8) >>> 0);
    var H = new Uint32Array([
      0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
    ]);
    var W = new Uint32Array(64);
    for (var offset = 0; offset < padded; offset += 64) {
      var i;
      for (i = 0; i < 16; i += 1) W[i] = view.getUint32(offset + i * 4);
      for (i = 16; i < 64; i += 1) {
        var w15 = W[i - 15];
        var w2 = W[i - 2];
        var s0 = rotr(w15, 7) ^ rotr(w15, 18) ^ (w15 >>> 3);
        var s1 = rotr(w2, 17) ^ rotr(w2, 19) ^ (w2 >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
      }
      var a = H[0], b = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
      for (i = 0; i < 64; i += 1) {
        var S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        var ch = (e & f) ^ (~e & g);
        var t1 = (h + S1 + ch + K[i] + W[i]) | 0;
        var S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        var maj = (a & b) ^ (a & c) ^ (b & c);
        var t2 = (S0 + maj) | 0;
        h = g;
        g = f;
        f = e;
        e = (d + t1) | 0;
        d = c;
        c = b;
        b = a;
        a = (t1 + t2) | 0;
      }
      H[0] += a; H[1] += b; H[2] += c; H[3] += d; H[4] += e; H[5] += f; H[6] += g; H[7] += h;
    }
    var out = new Uint8Array(32);
    var outView = new DataView(out.buffer);
    for (var j = 0; j < 8; j += 1) outView.setUint32(j * 4, H[j]);
    return out;
  }

  /** HMAC-SHA256 (RFC 2104) on the SHA-256 above. */
  function hmacSha256Js(keyBytes, messageBytes) {
    var block = new Uint8Array(64);
    block.set(keyBytes.length > 64 ? sha256(keyBytes) : keyBytes);
    var inner = new Uint8Array(64 + messageBytes.length);
    var outer = new Uint8Array(64 + 32);
    for (var i = 0; i < 64; i += 1) {
      inner[i] = block[i] ^ 0x36;
      outer[i] = block[i] ^ 0x5c;
    }
    inner.set(messageBytes, 64);
    outer.set(sha256(inner), 64);
    return sha256(outer);
  }

  // ---------------------------------------------------------------- wiring

  function init() {
    var keyInput = $('api-key');
    keyInput.value = apiKey();
    $('api-key-form').addEventListener('submit', function (event) {
      event.preventDefault();
      setApiKey(keyInput.value.trim());
      route();
    });
    $('api-key-clear').addEventListener('click', function () {
      keyInput.value = '';
      setApiKey('');
      route();
    });

    $('collections-refresh').addEventListener('click', loadCollections);
    $('collection-refresh').addEventListener('click', loadCollection);
    $('query-form').addEventListener('submit', runQuery);

    Array.prototype.forEach.call(document.querySelectorAll('input[name="jwt-access"]'), function (radio) {
      radio.addEventListener('change', syncJwtForm);
    });
    $('jwt-ve-enabled').addEventListener('change', syncJwtForm);
    $('jwt-add-collection').addEventListener('click', addCollectionRow);
    $('jwt-ve-add-match').addEventListener('click', addMatchRow);
    $('jwt-form').addEventListener('submit', generateToken);
    $('jwt-copy').addEventListener('click', copyToken);

    window.addEventListener('hashchange', route);
    route();
    document.body.setAttribute('data-ready', 'true');
  }

  // For tests and the curious: the signing code, including the fallback used without WebCrypto.
  window.QuiverDashboard = { signJwt: signJwt, hmacSha256: hmacSha256, hmacSha256Js: hmacSha256Js, sha256: sha256 };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();

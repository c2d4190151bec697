/*
 * Quiver dashboard: plain JavaScript, no build step, nothing loaded from elsewhere.
 *
 * Views, by hash route:
 *   #/                          the collections (GET /collections), a virtual list, and a
 *                               form to create one
 *   #/collections/<name>        one collection: summary, configuration, payload indexes,
 *                               aliases, snapshots (collection and shards, recovery by upload
 *                               or URL), a query against it, deletion
 *   #/collections/<name>/points the point browser: scroll page by page with a filter,
 *                               payloads and vectors, "find similar" by id
 *   #/console                   requests typed as `METHOD /path` + JSON body, with a history
 *   #/cluster                   peers, the shard x peer grid, transfers (polled live), and
 *                               move / replicate / drop / abort, each confirmed first
 *   #/snapshots                 full-storage snapshots, and the snapshot jobs (progress polled
 *                               live while they run; snapshot creates and recoveries made
 *                               here are jobs, wait=false)
 *   #/jwt                       a JWT generator: HS256 tokens signed in this browser with the API key
 *
 * The API key (or JWT) is kept in sessionStorage (this tab only) and sent as the
 * `api-key` header with every API call. With a JWT the page reads its claims to leave out
 * what the token may not do; with a key it learns that from the server's 403s.
 */
'use strict';

(function () {
  var KEY_STORAGE = 'quiver.dashboard.apiKey';
  var HISTORY_STORAGE = 'quiver.dashboard.history';

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
          if (!res.ok) {
            if (res.status === 403 && method !== 'GET') learnRefusal();
            throw new ApiError(res.status, describeFailure(res, json, text));
          }
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

  function collectionPath(name) {
    return '/collections/' + encodeURIComponent(name);
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
  }

  function humanBytes(n) {
    if (typeof n !== 'number') return '';
    if (n < 1024) return n + ' B';
    var units = ['KiB', 'MiB', 'GiB', 'TiB'];
    var v = n;
    var i = -1;
    do {
      v /= 1024;
      i += 1;
    } while (v >= 1024 && i < units.length - 1);
    return v.toFixed(v < 10 ? 1 : 0) + ' ' + units[i];
  }

  // ---------------------------------------------------------------- access

  /**
   * What the held credential may do. A JWT says it in its claims (`access`: "m", "r" or a
   * list of {collection, access}; none means manage). An API key does not: the page
   * offers everything until the server refuses a change with 403, then behaves as read-only.
   */
  var access = { kind: 'manage', collections: null, learned: false };
  /** The API key the server refused a change to (it stays read-only for the page until another is typed). */
  var refusedKey = null;

  function decodeClaims(token) {
    var part = token.split('.')[1] || '';
    var b64 = part.replace(/-/g, '+').replace(/_/g, '/');
    while (b64.length % 4) b64 += '=';
    var binary = atob(b64);
    var bytes = new Uint8Array(binary.length);
    for (var i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
    return JSON.parse(new TextDecoder().decode(bytes));
  }

  function readAccess() {
    var key = apiKey();
    access = { kind: 'manage', collections: null, learned: false };
    if (key && key === refusedKey) access = { kind: 'read', collections: null, learned: true };
    if (!key || !looksLikeJwt(key)) return;
    var claims;
    try {
      claims = decodeClaims(key);
    } catch (e) {
      return; // not readable: the server will say what it thinks of it
    }
    var a = claims && claims.access;
    if (a === 'r') access.kind = 'read';
    else if (Array.isArray(a)) {
      access.kind = 'collections';
      access.collections = {};
      a.forEach(function (item) {
        if (item && typeof item.collection === 'string') access.collections[item.collection] = item.access;
      });
    }
  }

  /** A change was refused with 403 while the page thought it allowed: from now on, read-only. */
  function learnRefusal() {
    if (access.kind === 'manage') {
      refusedKey = apiKey();
      access.kind = 'read';
      access.learned = true;
      applyAccess();
    }
  }

  /**
   * Whether the credential may do what an element needs: "m" global manage (create and
   * delete collections, aliases, recoveries, cluster changes, storage snapshots), "w" a
   * write on the collection at hand, "x" a change of its extras (snapshots; rw, not prw).
   */
  function allowed(need, collection) {
    if (access.kind === 'manage') return true;
    if (access.kind === 'read' || need === 'm') return false;
    var mode = access.collections && collection !== null ? access.collections[collection] : undefined;
    if (need === 'x') return mode === 'rw';
    return mode === 'rw' || mode === 'prw';
  }

  function applyAccess() {
    Array.prototype.forEach.call(document.querySelectorAll('[data-need]'), function (el) {
      el.classList.toggle('denied', !allowed(el.getAttribute('data-need'), currentCollection));
    });
    var badge = $('access-badge');
    var text = '';
    if (access.kind === 'read') text = access.learned ? 'read-only (the server refused a change)' : 'read-only token';
    else if (access.kind === 'collections') {
      text =
        'token for ' +
        Object.keys(access.collections)
          .map(function (c) {
            return c + ' (' + access.collections[c] + ')';
          })
          .join(', ');
    }
    badge.textContent = text;
    badge.hidden = !text;
  }

  /** A button that needs `need`; left out of sight (class "denied") when the credential lacks it. */
  function actionButton(label, need, testid, onClick) {
    var b = element('button', { type: 'button', 'data-testid': testid, 'data-need': need, class: 'write small' }, label);
    if (!allowed(need, currentCollection)) b.classList.add('denied');
    b.addEventListener('click', onClick);
    return b;
  }

  // ---------------------------------------------------------------- confirmation

  var pendingConfirm = null;

  /** Shows what is about to be sent; resolves true on Confirm, false on Cancel or Escape. */
  function confirmRequest(title, request) {
    if (pendingConfirm) pendingConfirm(false);
    $('confirm-title').textContent = title;
    $('confirm-request').textContent = request;
    $('confirm').hidden = false;
    $('confirm-ok').focus();
    return new Promise(function (resolve) {
      pendingConfirm = function (yes) {
        pendingConfirm = null;
        $('confirm').hidden = true;
        resolve(yes);
      };
    });
  }

  function requestText(method, path, body) {
    return method + ' ' + path + (body === undefined ? '' : '\n' + JSON.stringify(body, null, 2));
  }

  // ---------------------------------------------------------------- downloads

  /** Fetches `path` with the key and hands it to the browser as a file named `name`. */
  function download(path, name) {
    var headers = {};
    var key = apiKey();
    if (key) headers['api-key'] = key;
    return fetch(API_BASE + path, { headers: headers, cache: 'no-store' })
      .then(function (res) {
        if (!res.ok) {
          return res.text().then(function (text) {
            var json = null;
            try {
              json = JSON.parse(text);
            } catch (e) {
              json = null;
            }
            throw new ApiError(res.status, describeFailure(res, json, text));
          });
        }
        return res.blob();
      })
      .then(function (blob) {
        var url = URL.createObjectURL(blob);
        var a = element('a', { href: url, download: name });
        document.body.appendChild(a);
        a.click();
        a.remove();
        setTimeout(function () {
          URL.revokeObjectURL(url);
        }, 60000);
      });
  }

  // ---------------------------------------------------------------- router

  var VIEWS = [
    'view-collections',
    'view-collection',
    'view-points',
    'view-console',
    'view-cluster',
    'view-snapshots',
    'view-jwt',
    'view-not-found',
  ];
  var NAVS = ['nav-collections', 'nav-console', 'nav-cluster', 'nav-snapshots', 'nav-jwt'];
  /** Bumped on every navigation, so answers for a page left meanwhile are dropped. */
  var generation = 0;

  function route() {
    generation += 1;
    showStatus('');
    readAccess();
    var hash = location.hash.replace(/^#/, '') || '/';
    var m = /^\/collections\/([^/]+)(\/points)?$/.exec(hash);
    var name = null;
    if (m) {
      try {
        name = decodeURIComponent(m[1]);
      } catch (e) {
        name = null;
      }
    }
    currentCollection = null;
    if (hash === '/' || hash === '') show('view-collections', 'nav-collections', loadCollections);
    else if (name !== null && m[2]) {
      currentCollection = name;
      show('view-points', 'nav-collections', function () {
        openPoints(name);
      });
    } else if (name !== null) {
      show('view-collection', 'nav-collections', function () {
        openCollection(name);
      });
    } else if (hash === '/console') show('view-console', 'nav-console', openConsole);
    else if (hash === '/cluster') show('view-cluster', 'nav-cluster', openCluster);
    else if (hash === '/snapshots') {
      show('view-snapshots', 'nav-snapshots', function () {
        loadStorageSnapshots();
        watchJobs(generation);
      });
    }
    else if (hash === '/jwt') show('view-jwt', 'nav-jwt', openJwt);
    else show('view-not-found', null, null);
  }

  function show(viewId, navId, load) {
    VIEWS.forEach(function (id) {
      $(id).hidden = id !== viewId;
    });
    NAVS.forEach(function (id) {
      $(id).classList.toggle('active', id === navId);
    });
    applyAccess();
    if (load) load();
  }

  // ---------------------------------------------------------------- #/ collections (virtual list)

  var knownCollections = [];
  /** The names shown (after the filter). */
  var shownCollections = [];
  var ROW_HEIGHT = 32;
  var renderQueued = false;

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
        filterCollections();
        list.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        list.removeAttribute('aria-busy');
        clear(list);
        list.style.height = '';
        $('collections-count').textContent = '';
        list.setAttribute('data-loaded', 'error');
        showStatus('Could not list the collections: ' + err.message);
      },
    );
  }

  function filterCollections() {
    var needle = $('collections-filter').value.trim().toLowerCase();
    shownCollections = needle
      ? knownCollections.filter(function (n) {
          return n.toLowerCase().indexOf(needle) >= 0;
        })
      : knownCollections;
    $('collections-count').textContent =
      '(' + (needle ? shownCollections.length + ' of ' : '') + knownCollections.length + ')';
    $('collections-empty').hidden = knownCollections.length > 0;
    $('collections-scroller').scrollTop = 0;
    renderCollectionRows();
  }

  /** Puts in the page the rows in sight (and a few either side); the list's height holds the rest. */
  function renderCollectionRows() {
    renderQueued = false;
    var scroller = $('collections-scroller');
    var list = $('collections-list');
    var total = shownCollections.length;
    list.style.height = total * ROW_HEIGHT + 'px';
    var view = scroller.clientHeight || 600;
    var first = Math.max(0, Math.floor(scroller.scrollTop / ROW_HEIGHT) - 10);
    var last = Math.min(total, first + Math.ceil(view / ROW_HEIGHT) + 20);
    var fragment = document.createDocumentFragment();
    for (var i = first; i < last; i += 1) {
      var name = shownCollections[i];
      var li = element('li', { 'data-testid': 'collection-item', 'data-name': name });
      li.style.top = i * ROW_HEIGHT + 'px';
      li.appendChild(element('a', { href: collectionHash(name), 'data-testid': 'collection-link', 'data-name': name }, name));
      fragment.appendChild(li);
    }
    clear(list);
    list.appendChild(fragment);
    list.setAttribute('data-first', String(first));
  }

  function queueRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(renderCollectionRows);
  }

  function rememberCollections(names) {
    knownCollections = names.slice();
    var datalist = $('jwt-known-collections');
    clear(datalist);
    names.slice(0, 500).forEach(function (name) {
      datalist.appendChild(element('option', { value: name }));
    });
  }

  /** The same rule as the server's (ts/storage/toc.ts): 1-255 characters, none of / \ : * ? " < > | NUL, no leading dot. */
  var NAME_RE = /^[^\0/\\:*?"<>|]{1,255}$/;

  function positiveInt(text, what, max) {
    if (text === '') return undefined;
    var n = Number(text);
    if (!Number.isInteger(n) || n < 1 || (max !== undefined && n > max)) {
      throw new Error(what + ' must be a whole number from 1' + (max !== undefined ? ' to ' + max : ' up') + '.');
    }
    return n;
  }

  function createCollection(event) {
    event.preventDefault();
    setText('create-error', '');
    var name = $('create-name').value;
    var body;
    try {
      if (!NAME_RE.test(name) || name.charAt(0) === '.') {
        throw new Error('The name must be 1 to 255 characters, without / \\ : * ? " < > | and not starting with a dot.');
      }
      var size = positiveInt($('create-size').value.trim(), 'The vector size', 65536);
      if (size === undefined) throw new Error('The vector size is required.');
      body = { vectors: { size: size, distance: $('create-distance').value } };
      var shards = positiveInt($('create-shards').value.trim(), 'The shard number');
      var replication = positiveInt($('create-replication').value.trim(), 'The replication factor');
      if (shards !== undefined) body.shard_number = shards;
      if (replication !== undefined) body.replication_factor = replication;
    } catch (e) {
      return setText('create-error', e.message);
    }
    var form = $('collection-create');
    form.setAttribute('data-state', 'sending');
    return api('PUT', collectionPath(name), body).then(
      function () {
        form.setAttribute('data-state', 'done');
        form.hidden = true;
        $('create-name').value = '';
        location.hash = collectionHash(name);
      },
      function (err) {
        form.setAttribute('data-state', 'error');
        setText('create-error', 'Could not create ' + name + ': ' + err.message);
      },
    );
  }

  // ---------------------------------------------------------------- #/collections/<name>

  var currentCollection = null;
  var lastOpened = null;
  /** Whether GET /collections/{c}/optimizations is served (it answers 501 until it is). */
  var optimizationsServed = null;

  function openCollection(name) {
    currentCollection = name;
    cluster.collection = name; // the cluster view opens on the collection looked at last
    if (lastOpened !== name) {
      lastOpened = name;
      $('query-vector').value = '';
      $('query-using').value = '';
      clearQueryResults();
      $('upload-progress').hidden = true;
      $('upload-status').textContent = '';
      $('recover-url-status').textContent = '';
      $('optimizations').hidden = true;
      optPoll.busy = false;
    }
    applyAccess();
    $('collection-name').textContent = name;
    $('collection-points-link').setAttribute('href', collectionHash(name) + '/points');
    loadCollection();
  }

  function loadCollection() {
    var mine = generation;
    var name = currentCollection;
    var summary = $('collection-summary');
    clear(summary);
    $('collection-info').textContent = '';
    summary.setAttribute('data-loaded', 'false');
    loadAliases();
    loadSnapshots();
    loadOptimizations();
    return api('GET', collectionPath(name)).then(
      function (info) {
        if (mine !== generation) return;
        renderSummary(info || {});
        renderConfig((info && info.config) || {});
        renderIndexes((info && info.payload_schema) || {});
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
      ['optimizer status', typeof info.optimizer_status === 'object' ? JSON.stringify(info.optimizer_status) : info.optimizer_status],
      ['points', info.points_count],
      ['indexed vectors', info.indexed_vectors_count],
      ['segments', info.segments_count],
      ['vectors', describeVectors(vectors)],
    ];
    rows.forEach(function (row) {
      if (row[1] === undefined || row[1] === null) return;
      var key = row[0].replace(/ /g, '-');
      summary.appendChild(element('dt', null, row[0]));
      var dd = element('dd', { 'data-testid': 'summary-' + key }, String(row[1]));
      if (row[0] === 'status') dd.className = 'state state-' + String(row[1]);
      summary.appendChild(dd);
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

  /** The configuration as key paths and values (params.shard_number = 1, ...). */
  function renderConfig(config) {
    var table = $('collection-config');
    clear(table);
    var rows = [];
    (function walk(prefix, value) {
      if (value && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0) {
        Object.keys(value).forEach(function (k) {
          walk(prefix ? prefix + '.' + k : k, value[k]);
        });
      } else rows.push([prefix, value === null ? 'null' : typeof value === 'object' ? JSON.stringify(value) : String(value)]);
    })('', config);
    var body = element('tbody');
    rows.forEach(function (r) {
      var tr = element('tr', { 'data-testid': 'config-row', 'data-key': r[0] });
      tr.appendChild(element('th', null, r[0]));
      tr.appendChild(element('td', null, r[1]));
      body.appendChild(tr);
    });
    table.appendChild(body);
  }

  function renderIndexes(schema) {
    var body = $('indexes-body');
    clear(body);
    var fields = Object.keys(schema).sort();
    fields.forEach(function (field) {
      var s = schema[field] || {};
      var type = s.data_type || '';
      if (s.params && typeof s.params === 'object') {
        var extra = Object.keys(s.params)
          .filter(function (k) {
            return k !== 'type';
          })
          .map(function (k) {
            return k + '=' + JSON.stringify(s.params[k]);
          });
        if (extra.length) type += ' (' + extra.join(', ') + ')';
      }
      var tr = element('tr', { 'data-testid': 'index-row', 'data-field': field });
      tr.appendChild(element('td', { class: 'mono' }, field));
      tr.appendChild(element('td', { 'data-testid': 'index-type' }, type));
      tr.appendChild(element('td', { 'data-testid': 'index-points' }, s.points === undefined ? '' : String(s.points)));
      body.appendChild(tr);
    });
    $('indexes').hidden = fields.length === 0;
    $('indexes-empty').hidden = fields.length > 0;
  }

  /**
   * Optimizer progress: `GET /collections/{c}/optimizations?with=queued,completed`, the
   * running jobs with a bar, the queued ones and the last finished ones. Polled while a
   * job runs or waits (every 5 s otherwise); when the last one ends, the summary above is read again (status,
   * indexed vectors). A 501 (a peer that does not serve the route) hides the part for good.
   */
  var optPoll = { timer: null, busy: false };
  var OPT_POLL_MS = 500;
  /** While nothing runs: often enough to see a job that a write sets off. */
  var OPT_IDLE_MS = 5000;
  var OPT_COMPLETED = 8;

  function loadOptimizations() {
    var el = $('optimizations');
    clearTimeout(optPoll.timer);
    optPoll.timer = null;
    if (optimizationsServed === false) {
      el.hidden = true;
      return;
    }
    var mine = generation;
    var name = currentCollection;
    api('GET', collectionPath(name) + '/optimizations?with=queued,completed&completed_limit=' + OPT_COMPLETED).then(
      function (result) {
        optimizationsServed = true;
        if (mine !== generation || name !== currentCollection) return;
        var r = result || {};
        var busy = (r.running || []).length + (r.queued || []).length > 0;
        renderOptimizations(r);
        el.hidden = false;
        if (optPoll.busy && !busy) refreshSummary(mine, name);
        optPoll.busy = busy;
        pollOptimizations(mine, busy ? OPT_POLL_MS : OPT_IDLE_MS);
      },
      function (err) {
        if (err.status === 501) optimizationsServed = false;
        if (mine !== generation || name !== currentCollection) return;
        if (err.status === 501 || err.status === 404) {
          el.hidden = true;
          return;
        }
        setText('optimizations-summary', 'could not read them: ' + err.message);
        el.hidden = false;
        pollOptimizations(mine, OPT_IDLE_MS);
      },
    );
  }

  function pollOptimizations(mine, delay) {
    clearTimeout(optPoll.timer);
    optPoll.timer = setTimeout(function () {
      optPoll.timer = null;
      if (mine === generation) loadOptimizations();
    }, delay);
  }

  /** The summary alone, read again (an optimization ended). */
  function refreshSummary(mine, name) {
    api('GET', collectionPath(name)).then(
      function (info) {
        if (mine !== generation || name !== currentCollection) return;
        clear($('collection-summary'));
        renderSummary(info || {});
        $('collection-info').textContent = JSON.stringify(info, null, 2);
      },
      function () {},
    );
  }

  function fmtSeconds(s) {
    if (!(s >= 0)) return '';
    if (s < 60) return s.toFixed(1) + ' s';
    var m = Math.floor(s / 60);
    return m + ' min ' + Math.round(s - m * 60) + ' s';
  }

  function segmentPoints(o) {
    return (o.segments || []).reduce(function (n, seg) {
      return n + (seg.points_count || 0);
    }, 0);
  }

  function optimizationRow(o, state) {
    var tr = element('tr', { 'data-testid': 'optimization', 'data-state': state, 'data-optimizer': o.optimizer || '', class: 'opt-' + state });
    tr.appendChild(element('td', { 'data-testid': 'optimization-state' }, state));
    tr.appendChild(element('td', null, o.optimizer || ''));
    tr.appendChild(element('td', null, String((o.segments || []).length)));
    tr.appendChild(element('td', null, String(segmentPoints(o))));
    return tr;
  }

  function renderOptimizations(r) {
    var body = $('optimizations-body');
    clear(body);
    var running = r.running || [];
    var queued = r.queued || [];
    var completed = r.completed || [];
    var sum = r.summary || {};
    setText(
      'optimizations-summary',
      running.length + ' running, ' + (sum.queued_optimizations || 0) + ' queued (' + (sum.queued_points || 0) + ' points), idle segments: ' + (sum.idle_segments || 0),
    );
    var el = $('optimizations');
    el.setAttribute('data-running', String(running.length));
    el.setAttribute('data-queued', String(queued.length));
    running.forEach(function (o) {
      var p = o.progress || {};
      var tr = optimizationRow(o, 'running');
      var total = typeof p.total === 'number' ? p.total : null;
      var done = typeof p.done === 'number' ? p.done : 0;
      var cell = element('td');
      if (total !== null) {
        cell.appendChild(element('progress', { 'data-testid': 'optimization-progress', max: String(Math.max(total, 1)), value: String(done) }));
        cell.appendChild(element('span', { class: 'hint', 'data-testid': 'optimization-count' }, ' ' + done + ' / ' + total));
      }
      (p.children || []).forEach(function (c) {
        if (c.finished_at) return;
        cell.appendChild(element('div', { class: 'hint' }, c.name + (typeof c.total === 'number' ? ' ' + (c.done || 0) + ' / ' + c.total : '')));
      });
      tr.appendChild(cell);
      var elapsed = p.started_at ? (Date.now() - Date.parse(p.started_at)) / 1000 : NaN;
      var time = fmtSeconds(elapsed);
      if (total !== null && done > 0 && done < total && elapsed > 0) time += ', ~' + fmtSeconds((elapsed * (total - done)) / done) + ' left';
      tr.appendChild(element('td', { 'data-testid': 'optimization-time' }, time));
      body.appendChild(tr);
    });
    queued.forEach(function (o) {
      var tr = optimizationRow(o, 'queued');
      tr.appendChild(element('td', { class: 'hint' }, 'waits for the running job'));
      tr.appendChild(element('td'));
      body.appendChild(tr);
    });
    completed.forEach(function (o) {
      var st = o.status;
      var state = st === 'done' ? 'done' : st && typeof st === 'object' ? Object.keys(st)[0] || 'ended' : String(st);
      var p = o.progress || {};
      var tr = optimizationRow(o, state);
      var note = typeof p.total === 'number' ? (p.done || 0) + ' / ' + p.total : '';
      if (st && typeof st === 'object') note += (note ? ': ' : '') + st[state];
      tr.appendChild(element('td', { 'data-testid': 'optimization-count' }, note));
      var when = p.finished_at ? new Date(p.finished_at).toLocaleTimeString() : '';
      tr.appendChild(element('td', null, fmtSeconds(p.duration_sec) + (when ? ', ended ' + when : '')));
      body.appendChild(tr);
    });
    if (body.children.length === 0) {
      var tr = element('tr');
      tr.appendChild(element('td', { class: 'hint', colspan: '6' }, 'No optimization has run yet, none is queued.'));
      body.appendChild(tr);
    }
  }

  function loadAliases() {
    var mine = generation;
    var name = currentCollection;
    var list = $('aliases');
    list.removeAttribute('data-loaded');
    return api('GET', collectionPath(name) + '/aliases').then(
      function (result) {
        if (mine !== generation) return;
        clear(list);
        var aliases = (result && result.aliases) || [];
        if (aliases.length === 0) list.appendChild(element('li', { class: 'hint' }, 'No alias.'));
        aliases.forEach(function (a) {
          var li = element('li', { 'data-testid': 'alias', 'data-alias': a.alias_name });
          li.appendChild(element('span', { class: 'mono' }, a.alias_name + ' '));
          li.appendChild(
            actionButton('Delete', 'm', 'alias-delete', function () {
              changeAliases([{ delete_alias: { alias_name: a.alias_name } }], 'Delete alias ' + a.alias_name + '?');
            }),
          );
          list.appendChild(li);
        });
        list.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        clear(list);
        list.appendChild(element('li', { class: 'error' }, 'Could not list the aliases: ' + err.message));
        list.setAttribute('data-loaded', 'error');
      },
    );
  }

  function changeAliases(actions, title) {
    var body = { actions: actions };
    return confirmRequest(title, requestText('POST', '/collections/aliases', body)).then(function (yes) {
      if (!yes) return;
      return api('POST', '/collections/aliases', body).then(
        function () {
          $('alias-name').value = '';
          loadAliases();
        },
        function (err) {
          showStatus('Could not change the aliases: ' + err.message);
        },
      );
    });
  }

  function createAlias(event) {
    event.preventDefault();
    var alias = $('alias-name').value.trim();
    if (!alias) return showStatus('Type the alias to create.');
    changeAliases([{ create_alias: { collection_name: currentCollection, alias_name: alias } }], 'Create alias ' + alias + '?');
  }

  function deleteCollection() {
    var name = currentCollection;
    confirmRequest('Delete collection ' + name + ' and all its points?', requestText('DELETE', collectionPath(name))).then(function (yes) {
      if (!yes) return;
      api('DELETE', collectionPath(name)).then(
        function () {
          location.hash = '#/';
        },
        function (err) {
          showStatus('Could not delete ' + name + ': ' + err.message);
        },
      );
    });
  }

  // ---------------------------------------------------------------- snapshots (collection, shards, storage)

  /** One table body of snapshots: name, size, time, download and delete. */
  function renderSnapshotRows(body, list, base, need, testPrefix, reload) {
    clear(body);
    if (list.length === 0) {
      var tr0 = element('tr');
      tr0.appendChild(element('td', { colspan: '4', class: 'hint' }, 'No snapshot.'));
      body.appendChild(tr0);
    }
    list
      .slice()
      .sort(function (a, b) {
        return String(b.creation_time || '').localeCompare(String(a.creation_time || ''));
      })
      .forEach(function (s) {
        var tr = element('tr', { 'data-testid': testPrefix + 'snapshot', 'data-name': s.name });
        tr.appendChild(element('td', { class: 'mono' }, s.name));
        tr.appendChild(element('td', null, humanBytes(s.size)));
        tr.appendChild(element('td', null, s.creation_time || ''));
        var td = element('td', { class: 'actions' });
        var path = base + '/' + encodeURIComponent(s.name);
        var get = element('button', { type: 'button', class: 'small', 'data-testid': testPrefix + 'snapshot-download' }, 'Download');
        get.addEventListener('click', function () {
          download(path, s.name).catch(function (err) {
            showStatus('Could not download ' + s.name + ': ' + err.message);
          });
        });
        td.appendChild(get);
        td.appendChild(
          actionButton('Delete', need, testPrefix + 'snapshot-delete', function () {
            confirmRequest('Delete snapshot ' + s.name + '?', requestText('DELETE', path)).then(function (yes) {
              if (!yes) return;
              api('DELETE', path + '?wait=true').then(reload, function (err) {
                showStatus('Could not delete ' + s.name + ': ' + err.message);
              });
            });
          }),
        );
        tr.appendChild(td);
        body.appendChild(tr);
      });
  }

  function loadSnapshots() {
    var mine = generation;
    var name = currentCollection;
    var table = $('snapshots');
    table.removeAttribute('data-loaded');
    setText('snapshots-error', '');
    var base = collectionPath(name) + '/snapshots';
    api('GET', base).then(
      function (list) {
        if (mine !== generation) return;
        renderSnapshotRows($('snapshots-body'), list || [], base, 'x', '', loadSnapshots);
        table.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        table.setAttribute('data-loaded', 'error');
        setText('snapshots-error', 'Could not list the snapshots: ' + err.message);
      },
    );
    loadShardSnapshots(mine, name);
    loadJobs();
  }

  /** A folded part per shard held here (GET /collections/{c}/cluster local_shards), listed when opened. */
  function loadShardSnapshots(mine, name) {
    var box = $('shard-snapshots');
    clear(box);
    api('GET', collectionPath(name) + '/cluster').then(
      function (info) {
        if (mine !== generation) return;
        ((info && info.local_shards) || []).forEach(function (shard) {
          var id = shard.shard_id;
          var base = collectionPath(name) + '/shards/' + id + '/snapshots';
          var details = element('details', { 'data-testid': 'shard-snapshots-' + id });
          details.appendChild(element('summary', null, 'Shard ' + id + ' snapshots (' + shard.points_count + ' points here, ' + shard.state + ')'));
          var body = element('tbody');
          var table = element('table');
          var head = element('thead');
          var hr = element('tr');
          ['name', 'size', 'created', ''].forEach(function (h) {
            hr.appendChild(element('th', null, h));
          });
          head.appendChild(hr);
          table.appendChild(head);
          table.appendChild(body);
          var reload = function () {
            api('GET', base).then(
              function (list) {
                renderSnapshotRows(body, list || [], base, 'x', 'shard-', reload);
              },
              function (err) {
                clear(body);
                body.appendChild(element('tr', { class: 'error' }, 'Could not list: ' + err.message));
              },
            );
          };
          details.appendChild(
            actionButton('Create shard snapshot', 'x', 'shard-snapshot-create', function () {
              snapshotOp('POST', base).then(reload, function (err) {
                showStatus('Could not snapshot shard ' + id + ': ' + err.message);
              });
            }),
          );
          details.appendChild(table);
          details.addEventListener('toggle', function () {
            if (details.open) reload();
          });
          box.appendChild(details);
        });
      },
      function () {
        /* no shard detail for this credential: the collection snapshots above remain */
      },
    );
  }

  function createSnapshot() {
    var name = currentCollection;
    var button = $('snapshot-create');
    button.disabled = true;
    $('snapshot-busy').textContent = canFollowJobs() ? 'Creating (a job, followed below)…' : 'Creating…';
    var here = function () {
      return currentCollection === name && !$('view-collection').hidden;
    };
    snapshotOp('POST', collectionPath(name) + '/snapshots').then(
      function (s) {
        button.disabled = false;
        if (!here()) return;
        $('snapshot-busy').textContent = 'Created ' + (s && s.name) + '.';
        loadSnapshots();
      },
      function (err) {
        button.disabled = false;
        if (!here()) return;
        $('snapshot-busy').textContent = '';
        setText('snapshots-error', 'Could not create a snapshot: ' + err.message);
      },
    );
  }

  /** Uploads the chosen file with XMLHttpRequest (whose upload reports progress), then recovers from it. */
  function recoverByUpload(event) {
    event.preventDefault();
    var file = $('recover-file').files[0];
    var form = $('recover-upload');
    var status = $('upload-status');
    if (!file) {
      status.textContent = 'Choose a snapshot file first.';
      return;
    }
    var name = currentCollection;
    var priority = $('recover-priority').value;
    var path = collectionPath(name) + '/snapshots/upload?wait=' + !canFollowJobs() + '&priority=' + priority;
    confirmRequest(
      'Replace collection ' + name + ' with the content of ' + file.name + '?',
      'POST ' + path + '\n(multipart/form-data, part "snapshot": ' + file.name + ', ' + humanBytes(file.size) + ')',
    ).then(function (yes) {
      if (!yes) return;
      var bar = $('upload-progress');
      bar.hidden = false;
      bar.max = file.size || 1;
      bar.value = 0;
      status.textContent = 'Uploading…';
      form.setAttribute('data-state', 'uploading');
      var xhr = new XMLHttpRequest();
      xhr.open('POST', API_BASE + path);
      var key = apiKey();
      if (key) xhr.setRequestHeader('api-key', key);
      xhr.upload.addEventListener('progress', function (e) {
        if (e.lengthComputable) {
          bar.max = e.total;
          bar.value = e.loaded;
          status.textContent = 'Uploading… ' + Math.floor((100 * e.loaded) / e.total) + '%';
        }
      });
      xhr.upload.addEventListener('load', function () {
        status.textContent = 'Uploaded; the server is recovering…';
      });
      var recovered = function () {
        status.textContent = 'Recovered ' + name + ' from ' + file.name + '.';
        form.setAttribute('data-state', 'done');
        if (currentCollection === name && !$('view-collection').hidden) loadCollection();
      };
      xhr.addEventListener('load', function () {
        var json = null;
        try {
          json = JSON.parse(xhr.responseText);
        } catch (e) {
          json = null;
        }
        if (xhr.status === 202) {
          bar.value = bar.max;
          status.textContent = 'Uploaded; the recovery runs as a job (below)…';
          form.setAttribute('data-state', 'running');
          followJob(json && json.job_id).then(recovered, function (err) {
            status.textContent = 'Recovery failed: ' + err.message;
            form.setAttribute('data-state', 'error');
          });
        } else if (xhr.status >= 200 && xhr.status < 300) {
          bar.value = bar.max;
          recovered();
        } else {
          var detail = json && json.status && json.status.error ? json.status.error : xhr.responseText.slice(0, 300);
          status.textContent = 'Recovery failed: ' + xhr.status + ' ' + xhr.statusText + (detail ? ': ' + detail : '');
          form.setAttribute('data-state', 'error');
          if (xhr.status === 403) learnRefusal();
        }
      });
      xhr.addEventListener('error', function () {
        status.textContent = 'Recovery failed: the connection broke during the upload.';
        form.setAttribute('data-state', 'error');
      });
      var data = new FormData();
      data.append('snapshot', file, file.name);
      xhr.send(data);
    });
  }

  function recoverFromUrl(event) {
    event.preventDefault();
    var location_ = $('recover-location').value.trim();
    var status = $('recover-url-status');
    var form = $('recover-url');
    if (!location_) {
      status.textContent = 'Type the snapshot URL.';
      return;
    }
    var name = currentCollection;
    var path = collectionPath(name) + '/snapshots/recover?wait=' + !canFollowJobs();
    var body = { location: location_, priority: $('recover-priority').value };
    confirmRequest('Replace collection ' + name + ' with the snapshot at this location?', requestText('PUT', path, body)).then(function (yes) {
      if (!yes) return;
      status.textContent = canFollowJobs() ? 'Recovering (a job, followed below)…' : 'Recovering…';
      form.setAttribute('data-state', 'running');
      var run = canFollowJobs()
        ? api('PUT', path, body).then(function (answer) {
            return followJob(answer && answer.job_id);
          })
        : api('PUT', path, body);
      run.then(
        function () {
          status.textContent = 'Recovered ' + name + '.';
          form.setAttribute('data-state', 'done');
          if (currentCollection === name && !$('view-collection').hidden) loadCollection();
        },
        function (err) {
          status.textContent = 'Recovery failed: ' + err.message;
          form.setAttribute('data-state', 'error');
        },
      );
    });
  }

  function loadStorageSnapshots() {
    var mine = generation;
    var table = $('storage-snapshots');
    table.removeAttribute('data-loaded');
    setText('storage-snapshots-error', '');
    api('GET', '/snapshots').then(
      function (list) {
        if (mine !== generation) return;
        renderSnapshotRows($('storage-snapshots-body'), list || [], '/snapshots', 'm', 'storage-', loadStorageSnapshots);
        table.setAttribute('data-loaded', 'true');
      },
      function (err) {
        if (mine !== generation) return;
        table.setAttribute('data-loaded', 'error');
        setText('storage-snapshots-error', 'Could not list the storage snapshots: ' + err.message);
      },
    );
  }

  function createStorageSnapshot() {
    var button = $('storage-snapshot-create');
    button.disabled = true;
    $('storage-snapshot-busy').textContent = canFollowJobs() ? 'Creating (a job, followed below)…' : 'Creating…';
    snapshotOp('POST', '/snapshots').then(
      function (s) {
        button.disabled = false;
        $('storage-snapshot-busy').textContent = 'Created ' + (s && s.name) + '.';
        loadStorageSnapshots();
      },
      function (err) {
        button.disabled = false;
        $('storage-snapshot-busy').textContent = '';
        setText('storage-snapshots-error', 'Could not create a storage snapshot: ' + err.message);
      },
    );
  }

  // ---------------------------------------------------------------- snapshot jobs

  /*
   * Snapshot creates and recoveries run as jobs (`wait=false`: a 202 with `job_id`), so
   * the page never holds a request open for minutes. Each job this page knows of is kept
   * here by id and, while it runs, polled (GET /snapshots/jobs/{id}) every JOB_POLL_MS;
   * polling stops when no job runs. GET /snapshots/jobs (global read) lists the recent
   * ones. A collection-scoped credential may not read jobs: it waits for the answer instead.
   */
  var JOB_POLL_MS = 500;
  var jobs = {};
  /** What to call when a job ends: id -> function(view). */
  var jobWaiters = {};
  var jobPoll = { timer: null, busy: false, again: false };
  var JOB_KINDS = {
    create_collection_snapshot: 'create snapshot',
    create_shard_snapshot: 'create shard snapshot',
    create_full_snapshot: 'create full snapshot',
    recover_collection_snapshot: 'recover collection',
    recover_shard_snapshot: 'recover shard',
  };

  function canFollowJobs() {
    return access.kind !== 'collections';
  }

  function withWait(path, wait) {
    return path + (path.indexOf('?') >= 0 ? '&' : '?') + 'wait=' + wait;
  }

  /**
   * Runs a snapshot operation: as a job followed in the jobs lists, or (a credential that
   * cannot read jobs) waiting for the answer. Resolves with the outcome (the snapshot's
   * description for a create), rejects with the server's words.
   */
  function snapshotOp(method, path, body) {
    if (!canFollowJobs()) return api(method, withWait(path, 'true'), body);
    return api(method, withWait(path, 'false'), body).then(function (answer) {
      return followJob(answer && answer.job_id);
    });
  }

  /** Follows job `id` until it ends: resolves with its result, rejects with its error. */
  function followJob(id) {
    if (!id) return Promise.reject(new ApiError(0, 'the server accepted the request but named no job to follow'));
    return new Promise(function (resolve, reject) {
      jobWaiters[id] = function (view) {
        if (view.state === 'completed') resolve(view.result);
        else reject(new ApiError(0, view.error || 'the job failed'));
      };
      if (!jobs[id]) jobs[id] = { id: id, state: 'running', unknown: true, started_at: new Date().toISOString() };
      pollJobsSoon(0);
    });
  }

  function setJob(view) {
    if (!view || !view.id) return;
    jobs[view.id] = view;
    if (view.state !== 'running' && jobWaiters[view.id]) {
      var done = jobWaiters[view.id];
      delete jobWaiters[view.id];
      done(view);
    }
  }

  function jobRunning(view) {
    return view.state === 'running' && !view.lost;
  }

  function pollJobsSoon(delay) {
    if (jobPoll.busy) {
      if (delay === 0) jobPoll.again = true;
      return;
    }
    if (jobPoll.timer !== null) {
      if (delay > 0) return;
      clearTimeout(jobPoll.timer);
    }
    jobPoll.timer = setTimeout(pollJobs, delay);
  }

  function pollJobs() {
    jobPoll.timer = null;
    var ids = Object.keys(jobs).filter(function (id) {
      return jobRunning(jobs[id]);
    });
    if (ids.length === 0) return;
    jobPoll.busy = true;
    Promise.all(
      ids.map(function (id) {
        return api('GET', '/snapshots/jobs/' + encodeURIComponent(id)).then(setJob, function (err) {
          var view = jobs[id];
          view.pollError = err.message;
          // Gone (a restart that forgot it) or not ours to read: stop asking.
          if (err.status === 404 || err.status === 403 || err.status === 401) {
            view.lost = true;
            if (jobWaiters[id]) {
              var done = jobWaiters[id];
              delete jobWaiters[id];
              done({ state: 'failed', error: 'the job could not be followed: ' + err.message });
            }
          }
        });
      }),
    ).then(function () {
      jobPoll.busy = false;
      renderJobs();
      var again = jobPoll.again;
      jobPoll.again = false;
      if (Object.keys(jobs).some(function (id) { return jobRunning(jobs[id]); })) pollJobsSoon(again ? 0 : JOB_POLL_MS);
    });
  }

  /** GET /snapshots/jobs: the recent jobs, merged into those known; the running ones polled. */
  function loadJobs() {
    var table = $('jobs');
    table.removeAttribute('data-loaded');
    renderJobs();
    if (!canFollowJobs()) {
      setText('jobs-error', 'Snapshot jobs need global read access; this token is for some collections only.');
      table.setAttribute('data-loaded', 'error');
      $('collection-jobs-box').hidden = true;
      return Promise.resolve();
    }
    return api('GET', '/snapshots/jobs').then(
      function (answer) {
        setText('jobs-error', '');
        ((answer && answer.jobs) || []).forEach(function (view) {
          // A job followed here keeps its newer view until the poll brings the next one.
          var known = jobs[view.id];
          if (!known || known.unknown || known.updated_at <= view.updated_at || view.state !== 'running') setJob(view);
        });
        renderJobs();
        table.setAttribute('data-loaded', 'true');
        pollJobsSoon(JOB_POLL_MS);
      },
      function (err) {
        table.setAttribute('data-loaded', 'error');
        setText('jobs-error', 'Could not list the snapshot jobs: ' + err.message);
      },
    );
  }

  /** While #/snapshots is open, the list is read again every JOB_LIST_MS (jobs started elsewhere: schedules, other tabs). */
  var JOB_LIST_MS = 5000;
  function watchJobs(mine) {
    if (mine !== generation) return;
    loadJobs().then(function () {
      setTimeout(function () {
        watchJobs(mine);
      }, JOB_LIST_MS);
    });
  }

  function sortedJobs(filter) {
    return Object.keys(jobs)
      .map(function (id) {
        return jobs[id];
      })
      .filter(function (v) {
        return !v.unknown && (!filter || filter(v));
      })
      .sort(function (a, b) {
        return String(b.started_at).localeCompare(String(a.started_at));
      });
  }

  function renderJobs() {
    renderJobRows($('jobs-body'), sortedJobs(null).slice(0, 100));
    var all = sortedJobs(null).length;
    $('jobs-count').textContent = all ? '(' + all + ')' : '';
    var name = currentCollection;
    var mine = name === null ? [] : sortedJobs(function (v) { return v.collection === name; }).slice(0, 10);
    $('collection-jobs-box').hidden = mine.length === 0;
    renderJobRows($('collection-jobs-body'), mine);
  }

  function seconds(s) {
    if (typeof s !== 'number') return '';
    if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  }

  /** The rows of `list`, each updated in place (a running job's row changes only its figures). */
  function renderJobRows(body, list) {
    var rows = {};
    Array.prototype.forEach.call(body.children, function (tr) {
      rows[tr.getAttribute('data-id')] = tr;
    });
    var cells = ['job-kind', 'job-target', 'job-state', 'job-phase', 'job-progress', 'job-rate', 'job-eta', 'job-started', 'job-outcome'];
    list.forEach(function (v, i) {
      var tr = rows[v.id];
      if (!tr) {
        tr = element('tr', { 'data-testid': 'job', 'data-id': v.id });
        cells.forEach(function (c) {
          tr.appendChild(element('td', { 'data-testid': c }));
        });
        var bar = element('progress', { 'data-testid': 'job-bar', max: '1', value: '0' });
        tr.children[4].appendChild(bar);
        tr.children[4].appendChild(element('span', { 'data-testid': 'job-bytes', class: 'hint' }));
      }
      delete rows[v.id];
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
      var total = typeof v.bytes_total === 'number' ? v.bytes_total : null;
      tr.setAttribute('data-kind', v.kind);
      tr.setAttribute('data-state', v.state);
      tr.setAttribute('data-phase', v.phase);
      tr.setAttribute('data-done', String(v.bytes_done));
      tr.setAttribute('data-total', total === null ? '' : String(total));
      tr.className = 'job-' + v.state;
      tr.children[0].textContent = (JOB_KINDS[v.kind] || v.kind) + (v.origin === 'schedule' ? ' (scheduled)' : '');
      tr.children[0].title = v.id;
      tr.children[1].textContent = v.collection === null ? 'full storage' : v.collection + (v.shard_id === null ? '' : ' shard ' + v.shard_id);
      tr.children[2].textContent = v.lost ? 'unknown' : v.state;
      tr.children[3].textContent = v.phase;
      var bar2 = tr.children[4].firstChild;
      if (total !== null && total > 0) {
        bar2.max = total;
        bar2.value = Math.min(v.bytes_done, total);
      } else if (v.state === 'completed') {
        bar2.max = 1;
        bar2.value = 1;
      } else bar2.removeAttribute('value'); // no total known: an indeterminate bar
      tr.children[4].lastChild.textContent =
        ' ' + humanBytes(v.bytes_done) + (total !== null ? ' of ' + humanBytes(total) + (total > 0 ? ' (' + Math.floor((100 * v.bytes_done) / total) + '%)' : '') : '');
      tr.children[5].textContent = v.rate_bytes_per_sec ? humanBytes(v.rate_bytes_per_sec) + '/s' : '';
      tr.children[6].textContent = v.state === 'running' ? seconds(v.eta_sec) : '';
      tr.children[7].textContent = String(v.started_at || '').slice(11, 19);
      tr.children[7].title = v.started_at || '';
      var outcome = tr.children[8];
      outcome.className = v.error || v.pollError ? 'error' : 'mono';
      outcome.textContent = v.error || v.pollError || (v.result && v.result.name) || (v.state === 'completed' ? 'done' : '');
    });
    Object.keys(rows).forEach(function (id) {
      rows[id].remove();
    });
  }

  // ---------------------------------------------------------------- query (collection view)

  function clearQueryResults() {
    setText('query-error', '');
    setText('query-count', '');
    $('query-results').hidden = true;
    clear($('query-results-body'));
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
    return api('POST', collectionPath(name) + '/points/query', body)
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
    return (
      Array.isArray(v) &&
      v.every(function (x) {
        return typeof x === 'number' && Number.isFinite(x);
      })
    );
  }

  function renderResults(points) {
    var body = $('query-results-body');
    clear(body);
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

  // ---------------------------------------------------------------- #/collections/<name>/points

  /** The browser's state: the offsets of the pages seen (the first is null), and the page shown. */
  var browse = { collection: null, offsets: [null], page: 0, filter: undefined, next: null };

  function openPoints(name) {
    var link = $('points-collection');
    link.textContent = name;
    link.setAttribute('href', collectionHash(name));
    if (browse.collection !== name) {
      browse = { collection: name, offsets: [null], page: 0, filter: undefined, next: null };
      $('points-filter').value = '';
      $('similar').hidden = true;
    }
    loadPointsPage();
  }

  function applyPointsFilter(event) {
    event.preventDefault();
    var text = $('points-filter').value.trim();
    setText('points-error', '');
    var filter;
    if (text) {
      try {
        filter = JSON.parse(text);
      } catch (e) {
        return setText('points-error', 'The filter is not valid JSON: ' + e.message);
      }
    }
    browse.filter = filter;
    browse.offsets = [null];
    browse.page = 0;
    loadPointsPage();
  }

  function loadPointsPage() {
    var mine = generation;
    var list = $('points-list');
    list.removeAttribute('data-loaded');
    setText('points-error', '');
    var limit = Number($('points-limit').value || '20');
    if (!Number.isInteger(limit) || limit < 1) return setText('points-error', 'The page size must be a positive whole number.');
    var body = { limit: limit, with_payload: true, with_vector: $('points-with-vectors').checked };
    var offset = browse.offsets[browse.page];
    if (offset !== null && offset !== undefined) body.offset = offset;
    if (browse.filter !== undefined) body.filter = browse.filter;
    $('points-next').disabled = true;
    $('points-prev').disabled = true;
    var started = performance.now();
    return api('POST', collectionPath(browse.collection) + '/points/scroll', body).then(
      function (result) {
        if (mine !== generation) return;
        var points = (result && result.points) || [];
        browse.next = result ? result.next_page_offset : null;
        renderPoints(points);
        $('points-page').textContent =
          'page ' + (browse.page + 1) + ' · ' + points.length + ' points · ' + Math.round(performance.now() - started) + ' ms';
        $('points-prev').disabled = browse.page === 0;
        $('points-next').disabled = browse.next === null || browse.next === undefined;
        list.setAttribute('data-loaded', 'true');
        list.setAttribute('data-page', String(browse.page + 1));
      },
      function (err) {
        if (mine !== generation) return;
        clear(list);
        $('points-prev').disabled = browse.page === 0;
        list.setAttribute('data-loaded', 'error');
        setText('points-error', 'Could not scroll the points: ' + err.message);
      },
    );
  }

  function nextPointsPage() {
    if (browse.next === null || browse.next === undefined) return;
    browse.offsets[browse.page + 1] = browse.next;
    browse.page += 1;
    loadPointsPage();
  }

  function prevPointsPage() {
    if (browse.page === 0) return;
    browse.page -= 1;
    loadPointsPage();
  }

  function firstValues(v) {
    var shown = v.slice(0, 6).map(function (x) {
      return typeof x === 'number' ? String(Number(x.toPrecision(4))) : JSON.stringify(x);
    });
    return '[' + shown.join(', ') + (v.length > 6 ? ', …' : '') + ']';
  }

  /** "128 dims [0.1, ...]" for a dense vector, and the like for sparse and multi-vectors. */
  function describeVector(v) {
    if (Array.isArray(v)) {
      if (v.length > 0 && Array.isArray(v[0])) return 'multi ' + v.length + ' × ' + v[0].length + ' ' + firstValues(v[0]);
      return v.length + ' dims ' + firstValues(v);
    }
    if (v && Array.isArray(v.indices)) return 'sparse, ' + v.indices.length + ' entries ' + firstValues(v.values || []);
    return JSON.stringify(v);
  }

  function renderPoints(points) {
    var list = $('points-list');
    clear(list);
    if (points.length === 0) list.appendChild(element('p', { class: 'hint' }, 'No point on this page.'));
    var fragment = document.createDocumentFragment();
    points.forEach(function (p) {
      var card = element('article', { class: 'point', 'data-testid': 'point', 'data-id': String(p.id) });
      var head = element('div', { class: 'point-head' });
      head.appendChild(element('strong', { class: 'mono', 'data-testid': 'point-id' }, String(p.id)));
      var vectors = p.vector;
      var usingName = null;
      if (vectors && !Array.isArray(vectors) && typeof vectors === 'object' && !Array.isArray(vectors.indices)) {
        usingName =
          Object.keys(vectors).filter(function (k) {
            return Array.isArray(vectors[k]);
          })[0] || null;
      }
      var similar = element('button', { type: 'button', class: 'small', 'data-testid': 'find-similar' }, 'Find similar');
      similar.addEventListener('click', function () {
        findSimilar(p.id, usingName);
      });
      head.appendChild(similar);
      card.appendChild(head);

      if (vectors !== undefined && vectors !== null) {
        var vl = element('ul', { class: 'plain vectors', 'data-testid': 'point-vectors' });
        if (Array.isArray(vectors) || (vectors && Array.isArray(vectors.indices))) {
          vl.appendChild(element('li', { class: 'mono', 'data-testid': 'point-vector', 'data-name': '' }, describeVector(vectors)));
        } else {
          Object.keys(vectors).forEach(function (k) {
            vl.appendChild(element('li', { class: 'mono', 'data-testid': 'point-vector', 'data-name': k }, k + ': ' + describeVector(vectors[k])));
          });
        }
        card.appendChild(vl);
      }
      var details = element('details', { open: '' });
      var keys = p.payload ? Object.keys(p.payload).length : 0;
      details.appendChild(element('summary', null, 'payload (' + keys + (keys === 1 ? ' key)' : ' keys)')));
      details.appendChild(element('pre', { 'data-testid': 'point-payload' }, JSON.stringify(p.payload || {}, null, 2)));
      card.appendChild(details);
      fragment.appendChild(card);
    });
    list.appendChild(fragment);
  }

  function findSimilar(id, usingName) {
    var box = $('similar');
    var body = $('similar-body');
    var q = { query: id, limit: 10, with_payload: true };
    if (usingName) q.using = usingName;
    box.hidden = false;
    box.setAttribute('data-state', 'running');
    $('similar-of').textContent = String(id) + (usingName ? ' (' + usingName + ')' : '');
    setText('similar-error', '');
    clear(body);
    var mine = generation;
    api('POST', collectionPath(browse.collection) + '/points/query', q).then(
      function (result) {
        if (mine !== generation) return;
        ((result && result.points) || []).forEach(function (p) {
          var tr = element('tr', { 'data-testid': 'similar-result', 'data-id': String(p.id) });
          tr.appendChild(element('td', { class: 'mono' }, String(p.id)));
          tr.appendChild(element('td', null, formatScore(p.score)));
          tr.appendChild(element('td', { class: 'payload' }, p.payload ? JSON.stringify(p.payload) : ''));
          body.appendChild(tr);
        });
        box.setAttribute('data-state', 'done');
        box.scrollIntoView({ block: 'nearest' });
      },
      function (err) {
        if (mine !== generation) return;
        box.setAttribute('data-state', 'error');
        setText('similar-error', 'Query failed: ' + err.message);
      },
    );
  }

  // ---------------------------------------------------------------- #/console

  var METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'];

  function readHistory() {
    try {
      return JSON.parse(sessionStorage.getItem(HISTORY_STORAGE) || '[]');
    } catch (e) {
      return [];
    }
  }

  function writeHistory(items) {
    try {
      sessionStorage.setItem(HISTORY_STORAGE, JSON.stringify(items.slice(0, 100)));
    } catch (e) {
      /* storage full or off: the history lasts as long as the page */
    }
  }

  function openConsole() {
    renderHistory();
  }

  function renderHistory() {
    var list = $('console-history');
    clear(list);
    readHistory().forEach(function (h) {
      var li = element('li', { 'data-testid': 'console-history-item' });
      var a = element('a', { href: '#/console', class: 'mono' }, h.request.split('\n')[0]);
      a.addEventListener('click', function (e) {
        e.preventDefault();
        $('console-input').value = h.request;
        $('console-input').focus();
      });
      li.appendChild(a);
      li.appendChild(element('span', { class: 'hint' }, ' → ' + h.status + ' in ' + h.ms + ' ms, ' + h.at));
      list.appendChild(li);
    });
  }

  /** `METHOD /path` on the first line, an optional JSON body after it. */
  function parseConsole(text) {
    var trimmed = text.replace(/^\s+/, '');
    var nl = trimmed.indexOf('\n');
    var first = (nl < 0 ? trimmed : trimmed.slice(0, nl)).trim();
    var rest = nl < 0 ? '' : trimmed.slice(nl + 1).trim();
    var m = /^([A-Za-z]+)\s+(\S+)$/.exec(first);
    if (!m) throw new Error('The first line must be METHOD /path, e.g. GET /collections');
    var method = m[1].toUpperCase();
    if (METHODS.indexOf(method) < 0) throw new Error('Unknown method ' + m[1] + ' (one of ' + METHODS.join(', ') + ')');
    var path = m[2];
    if (path.charAt(0) !== '/') path = '/' + path;
    var body;
    if (rest) {
      try {
        body = JSON.parse(rest);
      } catch (e) {
        throw new Error('The body is not valid JSON: ' + e.message);
      }
    }
    return { method: method, path: path, body: body };
  }

  function sendConsole(event) {
    if (event) event.preventDefault();
    setText('console-error', '');
    var text = $('console-input').value;
    var req;
    try {
      req = parseConsole(text);
    } catch (e) {
      return setText('console-error', e.message);
    }
    var headers = {};
    var key = apiKey();
    if (key) headers['api-key'] = key;
    var init = { method: req.method, headers: headers, cache: 'no-store' };
    if (req.body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(req.body);
    }
    var out = $('console-output');
    out.setAttribute('data-state', 'running');
    $('console-meta').textContent = 'Sending…';
    $('console-send').disabled = true;
    var started = performance.now();
    var status = 0;
    var statusText = '';
    return fetch(API_BASE + req.path, init)
      .then(function (res) {
        status = res.status;
        statusText = res.statusText;
        return res.text();
      })
      .then(
        function (body) {
          var ms = Math.round(performance.now() - started);
          var shown = body;
          try {
            shown = JSON.stringify(JSON.parse(body), null, 2);
          } catch (e) {
            /* not JSON: shown as it came */
          }
          out.textContent = shown;
          out.className = 'tall ' + (status >= 400 ? 'bad' : 'good');
          $('console-meta').textContent = status + ' ' + statusText + ' · ' + ms + ' ms · ' + humanBytes(body.length);
          $('console-meta').setAttribute('data-status', String(status));
          out.setAttribute('data-state', 'done');
          var items = readHistory();
          items.unshift({ request: text.trim(), status: status, ms: ms, at: new Date().toISOString().slice(11, 19) });
          writeHistory(items);
          renderHistory();
        },
        function (err) {
          out.textContent = '';
          out.setAttribute('data-state', 'error');
          $('console-meta').textContent = '';
          setText('console-error', 'Network error: ' + (err && err.message ? err.message : String(err)));
        },
      )
      .then(function () {
        $('console-send').disabled = false;
      });
  }

  // ---------------------------------------------------------------- #/cluster

  var POLL_MS = 1000;
  var cluster = { collection: null, peers: [], shards: [], timer: null, telemetryAt: 0, telemetry: null };

  function openCluster() {
    var mine = generation;
    var select = $('cluster-collection');
    api('GET', '/collections').then(
      function (result) {
        if (mine !== generation) return;
        var names = ((result && result.collections) || [])
          .map(function (c) {
            return c.name;
          })
          .sort();
        clear(select);
        var options = document.createDocumentFragment();
        names.forEach(function (n) {
          options.appendChild(element('option', { value: n }, n));
        });
        select.appendChild(options);
        if (cluster.collection !== null && names.indexOf(cluster.collection) >= 0) select.value = cluster.collection;
        cluster.collection = select.value || null;
        pollCluster(mine);
      },
      function (err) {
        if (mine !== generation) return;
        setText('cluster-error', 'Could not list the collections: ' + err.message);
        pollCluster(mine);
      },
    );
  }

  function pollCluster(mine) {
    if (mine !== generation) return;
    refreshCluster(mine).then(function () {
      if (mine !== generation) return;
      clearTimeout(cluster.timer);
      cluster.timer = setTimeout(function () {
        pollCluster(mine);
      }, POLL_MS);
    });
  }

  function refreshCluster(mine) {
    var view = $('view-cluster');
    var wantTelemetry = Date.now() - cluster.telemetryAt > 3000;
    var calls = [
      api('GET', '/cluster'),
      wantTelemetry ? api('GET', '/cluster/telemetry?timeout=1').catch(function () {
        return null;
      }) : Promise.resolve(cluster.telemetry),
      cluster.collection ? api('GET', collectionPath(cluster.collection) + '/cluster') : Promise.resolve(null),
    ];
    return Promise.all(calls).then(
      function (r) {
        if (mine !== generation) return;
        if (wantTelemetry) {
          cluster.telemetry = r[1];
          cluster.telemetryAt = Date.now();
        }
        setText('cluster-error', '');
        renderPeers(r[0], cluster.telemetry);
        renderGrid(r[0], r[2]);
        renderTransfers(r[2]);
        view.setAttribute('data-updated', String(Date.now()));
      },
      function (err) {
        if (mine !== generation) return;
        setText('cluster-error', err.message);
      },
    );
  }

  function renderPeers(info, telemetry) {
    var body = $('peers-body');
    clear(body);
    if (!info || info.status !== 'enabled') {
      $('cluster-status').textContent = 'Cluster mode is off: one node, no peers.';
      cluster.peers = [];
      return;
    }
    var leader = info.raft_info && info.raft_info.leader !== null ? String(info.raft_info.leader) : null;
    var remote = (telemetry && telemetry.cluster && telemetry.cluster.peers) || {};
    $('cluster-status').textContent =
      'this peer ' + info.peer_id + ' · leader ' + (leader === null ? 'unknown' : leader) + ' · term ' + info.raft_info.term + ' · commit ' + info.raft_info.commit;
    cluster.peers = Object.keys(info.peers).sort();
    cluster.leader = leader;
    cluster.peers.forEach(function (id) {
      var self = id === String(info.peer_id);
      var t = remote[id];
      var d = self ? { role: info.raft_info.role, term: info.raft_info.term, commit: info.raft_info.commit, num_pending_operations: info.raft_info.pending_operations } : t && t.details;
      var down = !self && t !== undefined && t.responsive === false;
      var tr = element('tr', { 'data-testid': 'peer', 'data-peer': id, 'data-leader': String(id === leader), 'data-reachable': String(!down) });
      if (id === leader) tr.classList.add('leader');
      if (down) tr.classList.add('down');
      var idCell = element('td', { class: 'mono' }, id);
      if (id === leader) idCell.appendChild(element('span', { class: 'badge' }, 'leader'));
      if (self) idCell.appendChild(element('span', { class: 'badge muted' }, 'this peer'));
      if (down) idCell.appendChild(element('span', { class: 'badge bad' }, 'unreachable'));
      tr.appendChild(idCell);
      tr.appendChild(element('td', { class: 'mono' }, info.peers[id].uri));
      tr.appendChild(element('td', { 'data-testid': 'peer-role' }, d ? String(d.role) : down ? '—' : '…'));
      tr.appendChild(element('td', null, d ? String(d.term) : ''));
      tr.appendChild(element('td', null, d ? String(d.commit) : ''));
      tr.appendChild(element('td', null, d && d.num_pending_operations !== undefined ? String(d.num_pending_operations) : ''));
      body.appendChild(tr);
    });
  }

  /** Every replica of the collection as {shard, peer, state}, from GET /collections/{c}/cluster. */
  function replicasOf(ci) {
    var out = [];
    if (!ci) return out;
    (ci.local_shards || []).forEach(function (s) {
      out.push({ shard: s.shard_id, peer: String(ci.peer_id), state: s.state });
    });
    (ci.remote_shards || []).forEach(function (s) {
      out.push({ shard: s.shard_id, peer: String(s.peer_id), state: s.state });
    });
    return out;
  }

  function renderGrid(info, ci) {
    var table = $('replica-grid');
    clear(table);
    var replicas = replicasOf(ci);
    var peers = cluster.peers.length ? cluster.peers.slice() : [];
    replicas.forEach(function (r) {
      if (peers.indexOf(r.peer) < 0) peers.push(r.peer);
    });
    var shards = [];
    replicas.forEach(function (r) {
      if (shards.indexOf(r.shard) < 0) shards.push(r.shard);
    });
    shards.sort(function (a, b) {
      return a - b;
    });
    cluster.shards = shards;
    cluster.replicas = replicas;
    if (!ci) {
      table.appendChild(element('caption', { class: 'hint' }, 'No collection chosen.'));
      return;
    }
    var head = element('tr');
    head.appendChild(element('th', null, 'shard'));
    peers.forEach(function (p) {
      var th = element('th', { class: 'mono' }, p);
      if (p === cluster.leader) th.appendChild(element('span', { class: 'badge' }, 'leader'));
      head.appendChild(th);
    });
    var thead = element('thead');
    thead.appendChild(head);
    table.appendChild(thead);
    var body = element('tbody');
    shards.forEach(function (s) {
      var tr = element('tr');
      tr.appendChild(element('th', null, String(s)));
      peers.forEach(function (p) {
        var r = replicas.filter(function (x) {
          return x.shard === s && x.peer === p;
        })[0];
        var td = element('td', { 'data-testid': 'replica-cell', 'data-shard': String(s), 'data-peer': p, 'data-state': r ? r.state : '' });
        if (r) {
          td.textContent = r.state;
          td.className = 'state state-' + r.state;
          td.title = 'Click to use as the source of an operation';
          td.addEventListener('click', function () {
            $('op-shard').value = String(s);
            syncOpForm();
            $('op-from').value = p;
          });
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    table.appendChild(body);
    table.setAttribute('data-collection', cluster.collection || '');
    syncOpChoices();
  }

  /** Parses the source peer's comment: "(sent/total)", "started Ns ago", "ETA: Xs". */
  function transferProgress(comment) {
    var out = { sent: null, total: null, seconds: null, eta: null };
    if (typeof comment !== 'string') return out;
    var m = /\((\d+)\/(\d+)\)/.exec(comment);
    if (m) {
      out.sent = Number(m[1]);
      out.total = Number(m[2]);
    }
    var s = /started (\d+(?:\.\d+)?)s ago/.exec(comment);
    if (s) out.seconds = Number(s[1]);
    var e = /ETA: ([0-9.]+s|unknown)/.exec(comment);
    if (e) out.eta = e[1];
    return out;
  }

  /** The last progress seen of each transfer, for a rate measured between two polls. */
  var transferSamples = {};

  /** Points per second (between this poll and an earlier one with fewer points sent, else the source's average) and the time left. */
  function transferSpeed(t, p) {
    var key = [cluster.collection, t.shard_id, t.from, t.to].join('/');
    var now = performance.now();
    var out = { rate: null, eta: p.eta || '' };
    if (p.sent === null) return out;
    var prev = transferSamples[key];
    if (prev && p.sent > prev.sent && now > prev.at) out.rate = ((p.sent - prev.sent) * 1000) / (now - prev.at);
    else if (prev && prev.rate !== null && p.sent === prev.sent) out.rate = prev.rate;
    else if (p.seconds) out.rate = p.sent / p.seconds;
    if (!prev || p.sent !== prev.sent) transferSamples[key] = { sent: p.sent, at: now, rate: out.rate };
    if (out.rate !== null && out.rate > 0 && p.total !== null) out.eta = Math.max(0, (p.total - p.sent) / out.rate).toFixed(1) + 's';
    return out;
  }

  function renderTransfers(ci) {
    var body = $('transfers-body');
    clear(body);
    var list = (ci && ci.shard_transfers) || [];
    $('transfers').hidden = list.length === 0;
    $('transfers-empty').hidden = list.length > 0;
    list.forEach(function (t) {
      var p = transferProgress(t.comment);
      var tr = element('tr', { 'data-testid': 'transfer', 'data-shard': String(t.shard_id), 'data-from': String(t.from), 'data-to': String(t.to) });
      tr.appendChild(element('td', null, String(t.shard_id)));
      tr.appendChild(element('td', { class: 'mono' }, t.from + ' → ' + t.to));
      tr.appendChild(element('td', null, t.sync ? 'replicate' : 'move'));
      tr.appendChild(element('td', null, t.method || 'default'));
      var cell = element('td');
      if (p.total !== null) {
        var bar = element('progress', { 'data-testid': 'transfer-progress', max: String(Math.max(p.total, 1)), value: String(p.sent) });
        cell.appendChild(bar);
        cell.appendChild(element('span', { class: 'hint', 'data-testid': 'transfer-count' }, ' ' + p.sent + ' / ' + p.total));
      } else {
        cell.appendChild(element('span', { class: 'hint' }, t.comment || 'progress is shown by the source peer (' + t.from + ')'));
      }
      tr.appendChild(cell);
      var speed = transferSpeed(t, p);
      tr.appendChild(element('td', { 'data-testid': 'transfer-rate' }, speed.rate === null ? (p.sent !== null ? 'measuring…' : '') : Math.round(speed.rate) + ' points/s'));
      tr.appendChild(element('td', { 'data-testid': 'transfer-eta' }, speed.eta));
      var td = element('td');
      td.appendChild(
        actionButton('Abort', 'm', 'transfer-abort', function () {
          sendClusterOp({ abort_transfer: { shard_id: t.shard_id, from_peer_id: t.from, to_peer_id: t.to } }, 'Abort the transfer of shard ' + t.shard_id + '?');
        }),
      );
      tr.appendChild(td);
      body.appendChild(tr);
    });
  }

  function fillSelect(select, values, keep) {
    var old = select.value;
    clear(select);
    values.forEach(function (v) {
      select.appendChild(element('option', { value: String(v) }, String(v)));
    });
    if (keep && values.map(String).indexOf(old) >= 0) select.value = old;
  }

  /** The shard and peer choices of the operation form, kept when still valid. */
  function syncOpChoices() {
    fillSelect($('op-shard'), cluster.shards, true);
    syncOpForm();
  }

  function syncOpForm() {
    var kind = $('op-kind').value;
    var shard = Number($('op-shard').value);
    var holders = (cluster.replicas || [])
      .filter(function (r) {
        return r.shard === shard;
      })
      .map(function (r) {
        return r.peer;
      });
    fillSelect($('op-from'), holders, true);
    var targets = cluster.peers.filter(function (p) {
      return holders.indexOf(p) < 0;
    });
    fillSelect($('op-to'), targets, true);
    $('op-to-label').hidden = kind === 'drop_replica';
    $('op-method-label').hidden = kind === 'drop_replica';
    $('op-from').previousSibling.textContent = kind === 'drop_replica' ? 'Peer ' : 'From peer ';
  }

  function submitClusterOp(event) {
    event.preventDefault();
    var kind = $('op-kind').value;
    var shard = Number($('op-shard').value);
    var from = $('op-from').value;
    var to = $('op-to').value;
    if ($('op-shard').value === '' || !from) return setText('cluster-error', 'Choose a shard and a peer that holds it.');
    var op;
    var what;
    if (kind === 'drop_replica') {
      op = { drop_replica: { shard_id: shard, peer_id: Number(from) } };
      what = 'Drop the replica of shard ' + shard + ' on peer ' + from + '?';
    } else {
      if (!to) return setText('cluster-error', 'Every peer holds shard ' + shard + ' already: no target left.');
      op = {};
      op[kind] = { shard_id: shard, from_peer_id: Number(from), to_peer_id: Number(to) };
      if ($('op-method').value) op[kind].method = $('op-method').value;
      what = (kind === 'move_shard' ? 'Move' : 'Replicate') + ' shard ' + shard + ' from peer ' + from + ' to peer ' + to + '?';
    }
    sendClusterOp(op, what);
  }

  function sendClusterOp(op, what) {
    var name = cluster.collection;
    var path = collectionPath(name) + '/cluster';
    var mine = generation;
    return confirmRequest(what, requestText('POST', path, op)).then(function (yes) {
      if (!yes) return;
      var form = $('cluster-op');
      form.setAttribute('data-state', 'sending');
      return api('POST', path, op).then(
        function () {
          form.setAttribute('data-state', 'done');
          setText('cluster-error', '');
          if (mine === generation) refreshCluster(mine);
        },
        function (err) {
          form.setAttribute('data-state', 'error');
          setText('cluster-error', err.message);
        },
      );
    });
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
    $('collections-filter').addEventListener('input', filterCollections);
    $('collections-scroller').addEventListener('scroll', queueRender, { passive: true });
    window.addEventListener('resize', queueRender);
    $('collection-create-open').addEventListener('click', function () {
      var form = $('collection-create');
      form.hidden = !form.hidden;
      if (!form.hidden) $('create-name').focus();
    });
    $('collection-create').addEventListener('submit', createCollection);

    $('collection-refresh').addEventListener('click', loadCollection);
    $('collection-delete').addEventListener('click', deleteCollection);
    $('query-form').addEventListener('submit', runQuery);
    $('alias-form').addEventListener('submit', createAlias);
    $('snapshot-create').addEventListener('click', createSnapshot);
    $('recover-upload').addEventListener('submit', recoverByUpload);
    $('recover-url').addEventListener('submit', recoverFromUrl);

    $('points-form').addEventListener('submit', applyPointsFilter);
    $('points-next').addEventListener('click', nextPointsPage);
    $('points-prev').addEventListener('click', prevPointsPage);

    $('console-form').addEventListener('submit', sendConsole);
    $('console-input').addEventListener('keydown', function (event) {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) sendConsole(event);
    });
    $('console-history-clear').addEventListener('click', function () {
      writeHistory([]);
      renderHistory();
    });

    $('cluster-collection').addEventListener('change', function () {
      cluster.collection = $('cluster-collection').value || null;
      refreshCluster(generation);
    });
    $('op-kind').addEventListener('change', syncOpForm);
    $('op-shard').addEventListener('change', syncOpForm);
    $('cluster-op').addEventListener('submit', submitClusterOp);

    $('storage-snapshot-create').addEventListener('click', createStorageSnapshot);
    $('jobs-refresh').addEventListener('click', loadJobs);

    $('confirm-ok').addEventListener('click', function () {
      if (pendingConfirm) pendingConfirm(true);
    });
    $('confirm-cancel').addEventListener('click', function () {
      if (pendingConfirm) pendingConfirm(false);
    });
    document.addEventListener('keydown', function (event) {
      if (event.key === 'Escape' && pendingConfirm) pendingConfirm(false);
    });

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

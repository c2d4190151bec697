#!/usr/bin/env python3
"""Child process of `npm run bench:engine` for the two anchor libraries:

  faiss           FAISS IndexHNSWFlat (PyPI faiss-cpu),
  hnswlib-native  hnswlib's Python binding built from source with -march=native.

Usage:
  anchors.py info [--build-log PATH]   one JSON line: versions and SIMD levels; exit 3
                                        when a module is missing.
  anchors.py serve                      JSON-lines requests on stdin, one JSON reply line
                                        each on stdout:
    {"cmd":"build","lib":..,"file":..,"nBase":..,"nQuery":..,"dim":..,"distance":"Cosine"|"Euclid",
     "m":16,"efConstruct":100,"seed":42,"threads":1}
    {"cmd":"search","mode":"single"|"batch","ef":64,"count":N,"k":10}
    {"cmd":"quit"}

The data are the bench's dataset cache file (float32 little-endian, nBase base rows then
nQuery query rows), memory-mapped and copied once into contiguous arrays. Cosine data
are normalised here and indexed with inner product (what a cosine index does inside);
Euclid uses squared L2. Everything runs on one thread, except the build of a `--scale`
run, which is given the run's build threads ("threads" in the build request). Timings are taken here, around
the library calls only; the parent computes recall from the returned ids.
"""
import gc
import json
import os
import re
import subprocess
import sys
import time

import numpy as np


def rss_bytes() -> int:
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def peak_rss_bytes() -> int:
    """VmHWM: the process's peak resident set so far."""
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmHWM:'):
                return int(line.split()[1]) * 1024
    return 0


def widest_register() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            flags = next((l for l in f if l.startswith('flags')), '').split()
    except OSError:
        flags = []
    return 'zmm' if 'avx512f' in flags else 'ymm' if 'avx2' in flags else 'xmm'


def faiss_info() -> dict:
    import faiss
    info = {'version': faiss.__version__, 'compileOptions': faiss.get_compile_options().strip()}
    cfg = getattr(faiss, 'SIMDConfig', None)
    if cfg is not None:
        try:
            info['simdLevel'] = cfg.get_level_name()
            info['dynamicDispatch'] = str(bool(cfg.has_dynamic_dispatch()))
        except Exception as e:  # older faiss: no SIMDConfig methods
            info['simdLevel'] = f'unknown ({e})'
    return info


def hnswlib_info(build_log: str | None) -> dict:
    import hnswlib
    from importlib import metadata
    so = hnswlib.__file__
    reg = widest_register()
    info = {'version': metadata.version('hnswlib'), 'extension': so, 'cpuWidestRegister': reg}
    try:
        dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', so], capture_output=True, text=True, check=True).stdout
        counts = {r: len(re.findall(r'%' + r + r'\d', dis)) for r in ('zmm', 'ymm')}
        info['objdump'] = f"{counts['zmm']} instructions on zmm (AVX-512), {counts['ymm']} on ymm (AVX/AVX2) registers"
        info['nativeCheck'] = 'ok' if counts[reg] > 0 else f'FAILED: no {reg} instructions for this CPU'
    except (OSError, subprocess.CalledProcessError) as e:
        info['objdump'] = f'unavailable ({e})'
        info['nativeCheck'] = 'unknown'
    if build_log and os.path.exists(build_log):
        with open(build_log, errors='replace') as f:
            text = f.read()
        lines = [l for l in text.splitlines() if 'bindings.cpp' in l and (' g++ ' in f' {l.strip()} ' or 'gcc' in l)]
        info['buildLog'] = ('compile line of bindings.cpp has -march=native' if any('-march=native' in l for l in lines)
                            else 'compile line of bindings.cpp lacks -march=native' if lines else 'no compile line found')
    else:
        info['buildLog'] = 'no build log (not installed by scripts/install-bench-anchors.sh)'
    return info


class Anchor:
    def __init__(self) -> None:
        self.lib = None
        self.index = None
        self.queries = None
        self.n = 0

    def build(self, req: dict) -> dict:
        self.index = None
        lib, dim, n_base, n_query = req['lib'], req['dim'], req['nBase'], req['nQuery']
        # Build threads: 1 in the default run; --scale asks for the run's build threads.
        threads = int(req.get('threads', 1))
        if lib == 'faiss':
            import faiss  # noqa: F401 (imported before the baseline RSS)
        else:
            import hnswlib  # noqa: F401
        gc.collect()
        rss_baseline = rss_bytes()
        mm = np.memmap(req['file'], dtype='<f4', mode='r', shape=(n_base + n_query, dim))
        base = np.array(mm[:n_base], dtype=np.float32, order='C')
        queries = np.array(mm[n_base:], dtype=np.float32, order='C')
        del mm
        cosine = req['distance'] == 'Cosine'
        if cosine:
            for a in (base, queries):
                norms = np.linalg.norm(a, axis=1, keepdims=True)
                norms[norms == 0] = 1
                a /= norms
        self.queries = queries
        self.lib = lib
        m, efc = req['m'], req['efConstruct']
        rss0 = rss_bytes()
        if lib == 'faiss':
            import faiss
            faiss.omp_set_num_threads(threads)
            omp_threads = faiss.omp_get_max_threads()
            index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT if cosine else faiss.METRIC_L2)
            index.hnsw.efConstruction = efc
            c0, t0 = time.process_time(), time.perf_counter()
            index.add(base)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            # Searches run on one thread whatever the build used.
            faiss.omp_set_num_threads(1)
            note = (f'IndexHNSWFlat.add(all vectors), omp_set_num_threads({threads}) '
                    f'(omp_get_max_threads() = {omp_threads} during the add), efConstruction={efc}')
        elif lib == 'hnswlib-native':
            import hnswlib
            index = hnswlib.Index(space='ip' if cosine else 'l2', dim=dim)
            index.init_index(max_elements=n_base, M=m, ef_construction=efc, random_seed=req.get('seed', 42))
            index.set_num_threads(1)
            c0, t0 = time.process_time(), time.perf_counter()
            index.add_items(base, np.arange(n_base), num_threads=threads)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            note = f'add_items(all vectors, num_threads={threads})'
        else:
            raise ValueError(f'unknown lib {lib}')
        rss1 = rss_bytes()
        self.index = index
        self.n = n_base
        del base
        gc.collect()
        # Process RSS with the index built and the input freed (the queries stay: dim*4 B each).
        rss_after = rss_bytes()
        mem = self.memory(dim)
        mem['detail'].update({'rssBaselineBytes': rss_baseline, 'rssAfterBuildBytes': rss_after, 'rssPeakBytes': peak_rss_bytes()})
        return {'seconds': seconds, 'cpuSeconds': cpu, 'rssDeltaBytes': rss1 - rss0, 'threadsNote': note, 'threads': threads, **mem}

    def memory(self, dim: int) -> dict:
        n = self.n
        if self.lib == 'faiss':
            import faiss
            ser = int(faiss.serialize_index(self.index).size)
            h = self.index.hnsw
            detail = {'serializedBytes': ser, 'vectorBytesPerVector': dim * 4, 'count': n}
            try:
                detail['neighborBytesPerVector'] = h.neighbors.size() * 4 / n
                detail['offsetAndLevelBytesPerVector'] = (h.offsets.size() * 8 + h.levels.size() * 4) / n
            except Exception:
                pass
            return {'bytesPerVector': ser / n, 'method': 'faiss.serialize_index() size (vectors + neighbor lists + offsets + levels)', 'detail': detail}
        size = int(self.index.index_file_size())
        return {'bytesPerVector': size / n, 'method': 'index_file_size() (level-0 block + upper link lists)',
                'detail': {'indexFileBytes': size, 'vectorBytesPerVector': dim * 4, 'count': n}}

    def set_ef(self, ef: int) -> None:
        if self.lib == 'faiss':
            self.index.hnsw.efSearch = ef
        else:
            self.index.set_ef(ef)

    def search(self, req: dict) -> dict:
        ef, k = req['ef'], req['k']
        q = self.queries
        count = min(req.get('count') or len(q), len(q))
        self.set_ef(ef)
        index = self.index
        faiss_lib = self.lib == 'faiss'
        if req['mode'] == 'batch':
            xq = q[:count]
            c0, t0 = time.process_time(), time.perf_counter()
            if faiss_lib:
                _, ids = index.search(xq, k)
            else:
                ids, _ = index.knn_query(xq, k=k, num_threads=1)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            return {'seconds': seconds, 'cpuSeconds': cpu, 'ids': [[int(x) for x in row if x >= 0] for row in ids]}
        lat = np.empty(count, dtype=np.float64)
        out = []
        perf = time.perf_counter_ns
        c0 = time.process_time()
        t0 = perf()
        t = t0
        if faiss_lib:
            for i in range(count):
                _, ids = index.search(q[i:i + 1], k)
                out.append(ids)
                t2 = perf()
                lat[i] = (t2 - t) / 1000
                t = t2
        else:
            for i in range(count):
                ids, _ = index.knn_query(q[i:i + 1], k=k, num_threads=1)
                out.append(ids)
                t2 = perf()
                lat[i] = (t2 - t) / 1000
                t = t2
        seconds, cpu = (t - t0) / 1e9, time.process_time() - c0
        return {'seconds': seconds, 'cpuSeconds': cpu, 'latUs': lat.tolist(),
                'ids': [[int(x) for x in row[0] if x >= 0] for row in out]}


def serve() -> None:
    a = Anchor()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            cmd = req.get('cmd')
            if cmd == 'quit':
                print(json.dumps({'ok': True}), flush=True)
                return
            if cmd == 'build':
                res = a.build(req)
            elif cmd == 'search':
                if a.index is None:
                    raise ValueError('search before build')
                res = a.search(req)
            else:
                raise ValueError(f'unknown cmd {cmd!r}')
            print(json.dumps({'ok': True, **res}), flush=True)
        except Exception as e:  # reported to the parent, which fails the row
            print(json.dumps({'ok': False, 'error': f'{type(e).__name__}: {e}'}), flush=True)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == 'info':
        log = sys.argv[sys.argv.index('--build-log') + 1] if '--build-log' in sys.argv else None
        out, missing = {}, []
        for name, fn in (('faiss', faiss_info), ('hnswlib-native', lambda: hnswlib_info(log))):
            try:
                out[name] = fn()
            except ImportError as e:
                missing.append(name)
                out[name] = {'missing': str(e)}
        print(json.dumps(out))
        sys.exit(3 if missing else 0)
    if len(sys.argv) >= 2 and sys.argv[1] == 'serve':
        serve()
        return
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == '__main__':
    main()

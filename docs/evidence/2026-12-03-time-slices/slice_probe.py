"""How long one GPU sync waits while K other processes keep a kernel running (time-slicing one H200)."""
import multiprocessing as mp
import statistics
import sys
import time


def spinner(stop, ready):
    import torch
    torch.cuda.init()
    s = torch.cuda.Stream()
    ready.set()
    with torch.cuda.stream(s):
        while not stop.is_set():
            torch.cuda._sleep(200_000_000)  # ~100 ms of spinning on the GPU per launch
            s.synchronize()


def probe(n=40):
    import torch
    x = torch.ones(16, device="cuda")
    torch.cuda.synchronize()
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t) * 1e3)
    return lat


if __name__ == "__main__":
    mp.set_start_method("spawn")
    import torch
    torch.cuda.init()
    for k in [int(a) for a in sys.argv[1:]] or [0, 1, 3, 7, 15]:
        stop = mp.Event()
        procs, readies = [], []
        for _ in range(k):
            r = mp.Event()
            p = mp.Process(target=spinner, args=(stop, r))
            p.start()
            procs.append(p)
            readies.append(r)
        for r in readies:
            r.wait(60)
        time.sleep(1.0)
        lat = probe()
        stop.set()
        for p in procs:
            p.join(30)
        q = sorted(lat)
        print(f"spinning contexts {k:2d}: sync latency ms median {statistics.median(lat):8.2f} "
              f"p10 {q[len(q) // 10]:8.2f} p90 {q[9 * len(q) // 10]:8.2f} max {q[-1]:8.2f}", flush=True)

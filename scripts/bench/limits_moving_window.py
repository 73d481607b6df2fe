"""The Python `limits` library's Redis moving-window strategy under N concurrent
asyncio callers, for comparison with toolgate's Redis store (scripts/bench-redis).
Prints one JSON line like the Rust bench."""

import asyncio
import json
import sys
import time

from limits import parse
from limits.aio.storage import RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter


async def main(url: str, callers: int, secs: float) -> None:
    storage = RedisStorage(url.replace("redis://", "async+redis://"), implementation="redispy")
    limiter = MovingWindowRateLimiter(storage)
    item = parse("1000000000/second")
    for _ in range(10):
        await limiter.hit(item, "bench")
    end = time.perf_counter() + secs
    lat: list[int] = []
    counts = [0, 0]

    async def caller() -> None:
        while time.perf_counter() < end:
            s = time.perf_counter()
            ok = await limiter.hit(item, "bench")
            lat.append(int((time.perf_counter() - s) * 1e6))
            counts[0 if ok else 1] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    took = time.perf_counter() - t0
    lat.sort()
    pct = lambda p: lat[(len(lat) - 1) * p // 100] if lat else 0  # noqa: E731
    print(json.dumps({"admitted": counts[0], "rejected": counts[1], "warmup": 10, "secs": round(took, 3),
                      "p50_us": pct(50), "p99_us": pct(99)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))

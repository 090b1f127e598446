"""The loop a careful user writes by hand with confluent-kafka: consume a
batch, append its values to a file, fdatasync, commit synchronously.

Usage: hand_loop.py BROKERS TOPIC RECORDS BATCH FILE
Prints one JSON object: the client's versions, records, seconds from the
first record (consumed alone, then written with the rest of its batch), the
latency of every batch from the start of its write to the commit's return,
and its progress: seconds from the first record and records committed, at
each commit. Exits non-zero unless it consumed exactly RECORDS.
"""
import json
import os
import sys
import time

import confluent_kafka
from confluent_kafka import Consumer


def main():
    brokers, topic, records, batch, path = sys.argv[1:6]
    records, batch = int(records), int(batch)
    conf = {
        "bootstrap.servers": brokers,
        "group.id": f"p2c-python-{os.getpid()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if confluent_kafka.libversion()[1] >= 0x020200FF:
        # The same fetch setting cairn and the ceiling use: librdkafka's
        # default (1000 ms) idles the fetcher whenever its queue is full.
        conf["fetch.queue.backoff.ms"] = 10
    else:
        # A librdkafka before 2.2.0 (a client linked to a distribution's)
        # has no such setting, and refused it: the queue's thresholds at
        # their maximum instead, as the kcat run sets them, so that it
        # never backs off.
        conf["queued.min.messages"] = 10000000
        conf["queued.max.messages.kbytes"] = 2097151
    c = Consumer(conf)
    c.subscribe([topic])
    n = 0
    lat_us = []
    progress = []
    # The clock starts at the first record, as cairn's and the ceiling's do:
    # that record is consumed alone and leads the first batch, so the time
    # the rest of that batch takes to arrive is counted too.
    while True:
        head = c.consume(num_messages=1, timeout=1.0)
        if head:
            first = time.monotonic()
            break
    with open(path, "ab") as f:
        while n < records:
            # Never more than are left: librdkafka's batch consume waits out
            # its timeout for a batch it cannot fill, and a last partial
            # batch would add that whole second to the loop's time.
            want = min(batch, records - n) - len(head)
            msgs = head + (c.consume(num_messages=want, timeout=1.0) if want else [])
            head = []
            if not msgs:
                continue
            t = time.monotonic()
            for m in msgs:
                if m.error():
                    raise SystemExit(f"consume: {m.error()}")
                f.write(m.value())
                f.write(b"\n")
            f.flush()
            os.fdatasync(f.fileno())
            c.commit(asynchronous=False)
            done = time.monotonic()
            lat_us.append(int((done - t) * 1e6))
            n += len(msgs)
            progress.append((done - first, n))
    seconds = time.monotonic() - first
    c.close()
    if n != records:
        raise SystemExit(f"consumed {n} records, expected {records}")
    def name(v):
        # A (string, int) pair in most releases, a string in some.
        return v[0] if isinstance(v, tuple) else str(v)

    json.dump({
        "version": name(confluent_kafka.version()),
        "librdkafka": name(confluent_kafka.libversion()),
        "records": n,
        "seconds": seconds,
        "lat_us": lat_us,
        "progress": progress,
    }, sys.stdout)


if __name__ == "__main__":
    main()

"""Reading a run's captured output, capped: shared by the host (`run_python`) and the pool
worker (`_forkserver.py`, which imports it by path), so both cut output the same way."""


def read_capped(path, limit: int) -> tuple[str, bool]:
    """The file's text, or its head and tail with a note of what was cut; and whether it was cut."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(0)
        if size <= limit:
            return f.read().decode("utf-8", "replace"), False
        head = f.read(limit // 2)
        f.seek(size - limit // 2)
        tail = f.read()
    cut = f"\n...[{size - len(head) - len(tail)} bytes cut]...\n"
    return head.decode("utf-8", "replace") + cut + tail.decode("utf-8", "replace"), True

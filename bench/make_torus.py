#!/usr/bin/env python3
"""Writes a torus (R 1, r 0.35) as an OBJ of about N triangles, for timing `tessera fit sdf`
on a large mesh (BENCHMARKS.md, issue 33):

    python3 bench/make_torus.py torus.obj 1000000
"""
import math
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, n = sys.argv[1], int(sys.argv[2])
    u = max(3, int(math.sqrt(n)))  # around the ring
    v = max(3, n // (2 * u))       # around the tube
    big, small = 1.0, 0.35
    with open(path, "w") as f:
        for i in range(u):
            a = 2 * math.pi * i / u
            for j in range(v):
                b = 2 * math.pi * j / v
                ring = big + small * math.cos(b)
                f.write(f"v {ring * math.cos(a):.7f} {ring * math.sin(a):.7f} {small * math.sin(b):.7f}\n")
        for i in range(u):
            for j in range(v):
                p, q = i * v + j + 1, (i + 1) % u * v + j + 1
                p2, q2 = i * v + (j + 1) % v + 1, (i + 1) % u * v + (j + 1) % v + 1
                f.write(f"f {p} {q} {q2}\nf {p} {q2} {p2}\n")
    print(f"{path}: {2 * u * v} triangles")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Do two kernel caches hold the same machine code for the same specializations?

    same_machine_code.py CACHE_A CACHE_B

For a refactor that must not change any result (docs/determinism.md, "Proving a refactor changes
no bits"): fill one cache with the old build and one with the new (`ssdgen compile --preset ...`
with SSD_CACHE_DIR=CACHE_A / CACHE_B), then compare. Entries are matched by their normalized
specialization (the entry header's spec_json); for each pair the executable sections of the cubins
(`.text.*`) and the kernels' parameter and shared-memory layouts (`.nv.constant0.*`,
`.nv.shared.*`) are compared byte for byte. The cubins as files differ anyway (the key record and
symbol tables hold names); equal code means equal bits on the GPU for every input. Exit 0 when
every specialization in both caches has identical code, 1 otherwise (each difference is listed).
Needs no GPU; reads the cache entry format of src/cache (48-byte prefix, JSON header, cubin).
"""
import json
import os
import struct
import sys

PREFIX = 48  # magic (8), schema version (4), header length (4), header SHA-256 (32)


def entries(root):
    """{spec_json: cubin bytes} for every entry file under root/v1/entries."""
    out = {}
    for dirpath, _, names in os.walk(os.path.join(root, "v1", "entries")):
        for name in names:
            data = open(os.path.join(dirpath, name), "rb").read()
            if len(data) < PREFIX:
                continue
            header_len = struct.unpack_from("<I", data, 12)[0]
            header = json.loads(data[PREFIX:PREFIX + header_len])
            cubin = data[PREFIX + header_len:]
            assert len(cubin) == header["cubin_size"], name
            spec = json.loads(header["spec_json"])
            spec.pop("struct_size", None)
            out[json.dumps(spec, sort_keys=True)] = cubin
    return out


def code_sections(cubin):
    """{section name: bytes} of the ELF's code and layout sections (NOBITS sections as sizes)."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    secs = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    out = {}
    for name, typ, _, _, off, size in secs:
        n = cubin[strtab + name:cubin.index(b"\0", strtab + name)].decode()
        if n.startswith((".text.", ".nv.constant0.", ".nv.shared.")):
            out[n] = size.to_bytes(8, "little") if typ == 8 else cubin[off:off + size]
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    a, b = entries(sys.argv[1]), entries(sys.argv[2])
    common = sorted(set(a) & set(b))
    differ = []
    for spec in common:
        if code_sections(a[spec]) != code_sections(b[spec]):
            differ.append(spec)
    for spec in differ:
        print("DIFFERENT", spec)
    for spec in sorted(set(a) ^ set(b)):
        print("only in", "A" if spec in a else "B", spec)
    print(f"same machine code: {len(common) - len(differ)} of {len(common)} specializations "
          f"({len(set(a) - set(b))} only in A, {len(set(b) - set(a))} only in B)")
    return 0 if not differ and set(a) == set(b) else 1


if __name__ == "__main__":
    sys.exit(main())

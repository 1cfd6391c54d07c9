# Runs a program with arguments holding arbitrary bytes, which lit RUN lines cannot spell:
# \xNN escapes in the arguments after the program are turned into those bytes.
#   %python %S/Inputs/argv_bytes.py PROGRAM ARG...
import os
import sys

args = [a.encode().decode("unicode_escape").encode("latin-1") for a in sys.argv[2:]]
os.execv(sys.argv[1], [sys.argv[1].encode()] + args)

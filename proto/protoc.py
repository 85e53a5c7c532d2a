"""protoc, from the hash-locked grpcio-tools wheel (Bazel offline has no protoc toolchain)."""

import sys

from grpc_tools import protoc

if __name__ == "__main__":
    sys.exit(protoc.main(["protoc"] + sys.argv[1:]))

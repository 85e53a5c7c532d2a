#!/bin/sh
echo "coverage tools are not available offline (stand-in @remote_coverage_tools)" >&2
exit 1

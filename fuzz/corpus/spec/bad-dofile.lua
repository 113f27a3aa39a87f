-- expect: 'dofile' is not available in a spec
dofile("/etc/passwd")

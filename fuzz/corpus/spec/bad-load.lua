-- expect: :2: 'load' is not available in a spec
return load("return 1")()

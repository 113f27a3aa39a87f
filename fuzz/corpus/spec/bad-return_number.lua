-- expect: the spec returned an integer; allowed: a spec table
return 42

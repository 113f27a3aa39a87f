-- expect: string\.find is not available in a spec \(pattern matching has no time bound\)
-- backtracking patterns take exponential time inside one C call
return string.find(string.rep("a", 100000), string.rep("a*", 20) .. "b")

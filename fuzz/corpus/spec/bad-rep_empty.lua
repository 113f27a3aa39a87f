-- expect: the spec returned a string
-- string.rep of an empty string makes nothing, 2^62 times: it must return at once
return string.rep("", 1 << 62)

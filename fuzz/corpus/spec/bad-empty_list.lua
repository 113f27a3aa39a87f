-- expect: the spec returned an empty table
return {}

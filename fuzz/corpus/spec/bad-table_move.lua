-- expect: table\.move of elements 1\.\.1000000000000000 is too many
-- moving nils between plain tables allocates nothing: an endless C loop without a bound
table.move({}, 1, 1e15, 1, {})

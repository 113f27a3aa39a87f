-- expect: error object is a table value
error({ code = 1 })

-- expect: ^.{1,1200}A\.\.\. \([0-9]+ more bytes\)$
error(string.rep("A", 1e5))

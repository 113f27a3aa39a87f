-- expect: :2: spec expects one table
return spec("qwen3-4b")

-- expect: :2: string\.dump is not available in a spec
return string.dump(print)

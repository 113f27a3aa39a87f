-- expect: archs: this spec does not fit sm_86: qg_estimate needs 133[0-9]+ bytes .* sm_86 \(RTX 30xx.*\) allows 101376 bytes a CTA
-- head_dim 256 with a group of 64 f32 queries: estimate's staged queries alone are 130 KiB,
-- more than a 99 KiB CTA (sm_86, sm_89, sm_120) may hold; the same spec fits sm_80 and sm_90
return spec{ name = "big-group", head_dim = 256, n_head = 64, n_head_kv = 1, in_type = "f32", k_type = "q8_0",
             sparse = true, archs = { "sm_80", "sm_86" } }

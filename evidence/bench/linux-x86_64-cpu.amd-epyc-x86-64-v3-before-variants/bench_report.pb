linux-x86_64-cpuAMD EPYC (2Gsha256:51b6aca64a7eedc308dee1d8ad79101892a2c927095c51bc64b7d93b3aecafeaBt
largelane!ğ6oœTîs@)÷uàœŠX@2large.lane.0.json:@1a1c6d55e37256633471817e040e9856aa985d6677ab4a4fa415aaaca2011fc6B~
large	reference!•)æ ¨p@)8¼ "5©X@2large.reference.0.json:@5e0a3f327e10e7c27ca73d26e525823254ec2f1a8f973fc0b94b91512440b14dB€
large	reference!¨Pİü»@){£V˜¾CY@2large.reference.1.json:@9f335180cdaa87d01618e62b5cf7d8b51dabe302c18ffb9966c033c903c07fc1Bv
largelane!qW¯"£³t@)t$—ÿ±V@2large.lane.1.json:@1a518a1f4c620b8ee8489189297ad5a8eaef86658fbcf2265eb0352b7f1b31aeBv
largelane!Qö–r¾ûs@)À3‰~X@2large.lane.2.json:@4e63594d7886af00ddc26b76070d7bbb90c6c62f84eb52ff4e0f27bb38048a55B€
large	reference!\…z:4@)N`:­Û Y@2large.reference.2.json:@24def0086c5cb09967fa4387345b6fdea8319b05de002828a87e0b65c79a638cB€
large	reference!øQû]‹@)34FV@2large.reference.3.json:@fb92e8263c878cdb9f209193293d99e3ca487348aa2f2608640268613ee53260Bv
largelane!q:ÉV)t@)Æİ Z+ÜX@2large.lane.3.json:@2dd570223f88b645348d9acc723ffd37106ab313e1eeeb61349cea1acf341a14Br
tinylane!â”¹yMà@)	Áªz)³–@2tiny.lane.0.json:@52f1ed653517372428f527c25e8e5e32d3717ef429f1d6ac20b12e672f4a19c2B|
tiny	reference!ÄAB¦1ä@)Q»_èO“@2tiny.reference.0.json:@bcd9dc105fe6f8d9d461c22379aa3d68bed9d3e971b86ad363d211154a2bcf39B~
tiny	reference!ï9°Şræ@)j¼!M›”@2tiny.reference.1.json:@3c5dc229ff0214090b48a378a8448f5d26477bdb3bc441429d17955113097f1bBt
tinylane!y±0Dš¬Ş@)ğŞQc¼•@2tiny.lane.1.json:@ba8594540e71013ccdcef8b044bc1478157d62189775de229a5d100bbe4b9a72Bt
tinylane!6#ƒÜ´™à@)%Y‡£‹¦—@2tiny.lane.2.json:@5cdfab9b75ea1cea83f3277c0b830bf749cdf5494031f9dd80929595fb08979bB~
tiny	reference!7QKó½å@)*¬TPqÓ“@2tiny.reference.2.json:@f3b90129b62e91d37e242df3caa7e5ceed49a79213c51f17746153e3eb5f2be2B~
tiny	reference!¯]Úp3äå@)l\ÿ®ï•”@2tiny.reference.3.json:@36c6ba1d4226acb89dd3d83f72bcc62337faa6574ca2e2aa74e30e5964f7eb61Bt
tinylane!¬‹ÛèÆ7à@)”¢•{Ñø•@2tiny.lane.3.json:@da31fa4b80fb7a74f7f44a57c045de26034f1583de6ce20c3f3ba821ebebc54bJH
large€À„Á€  )³³èŠt@1Æ½ù~@9_j¥3¡Õ?A\?ıgM„X@IÚ¯;İyöX@Qò~Ñ£mï?JF
tiny€¨À!€  )GJ1Š!à@1s×2Ğå@9dÖÑ©ç?AÎ1 {ıU–@IKª°4”@QgŸPÌ¯ñ?
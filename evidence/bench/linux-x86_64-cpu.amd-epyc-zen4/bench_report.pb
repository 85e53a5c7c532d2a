linux-x86_64-cpuAMD EPYC (2Gsha256:19cf954ade99277b04cd9b6404c3fe4a10f1137812fd65d06890c65928067114Bt
largelane!H¿}…@)Y¿™˜.ÕP@2large.lane.0.json:@7de1e9c8d74bb8ab312f9409a2e42a02ab41b73320c3a7896b5685315cbf95b0B~
large	reference!@ú&Mc†@)?æÈÊoY@2large.reference.0.json:@eb81c21cf6b268adc3659686c14f2a70c510852c7a29d70a0ef724457594fd46B€
large	reference!¿D¼u˜Œ@)%»¶RY@2large.reference.1.json:@a381e5df999e11b93b443c6bc55b55ca415048745827a13a5837e56437b60808Bv
largelane!›9$µ0d@)MùT>X@2large.lane.1.json:@26a7fdb9117646c3b625e9111358eb794f4639b016750f6fd72f74a5ef8b96c1Bv
largelane!WCâ«™@)£¢Ñ/Y@2large.lane.2.json:@02b55219d015c86c99cab0da0d4d14136bfe702b0166e7963ddff554e18f03f8B€
large	reference![éµÙ¸@)•c²¸ÿ‹W@2large.reference.2.json:@0e6dc6c3617048ad8c7ce3bd151395a162ebd165cb4351576fbc81485b6c7ce3B€
large	reference!`ÉU,~c@)çÈÊ/ƒ¸X@2large.reference.3.json:@39797a15398aae64e3feae1faa46805d8521aac8ea31a1f058a635b7e98c9e74Bv
largelane!°bƒ…×@)Ñ[<¼ç W@2large.lane.3.json:@6ca4fe455871487dd3255c0cc9ec7f40984b8789b61f0f163024ffd105e07794Br
tinylane![³Hcç@)-—Î£“@2tiny.lane.0.json:@6cd5829e1d6a3dd6e2ce445a599fe54a09dedb665822d41bb51a7a52f2c15414B|
tiny	reference!’—51xå@),¹jì•@2tiny.reference.0.json:@605ad0f4193bc4d5644fd436b4a2deffce678edad5bb60bb89e8a7ef6c6f76afB~
tiny	reference!hË¹bæ@)z9ì¾“’@2tiny.reference.1.json:@95039782d2313fba3d375cdca398f2a448684c3868ae6131a481afa13e53c38cBt
tinylane!<¿(Á•óè@)%Ì´ı«£–@2tiny.lane.1.json:@a2abfb28e0294bf1e51bd84e163cbba32cc510f75b5e415d8942322693a4a952Bt
tinylane!·²DçÙ6ç@)ƒİ°mÁV”@2tiny.lane.2.json:@e9f8558438d32e9db48462d25b41cb01a684bbc3ef7b18e8ed3a3248abef6af7B~
tiny	reference!Âl@¸ã@)©÷TNO”@2tiny.reference.2.json:@b50cc011bc7cc2c4cf8be7070d8a7a54fd42bfc432fade14111b75e14368d35eB~
tiny	reference!áy©X¬oå@)c´ªÖ”@2tiny.reference.3.json:@04ba423ed8599c726d81082fce412f3848e2209d26f6f9659bd4600396c78c04Bt
tinylane!lê<*ïğè@)®ôÚlì–@2tiny.lane.3.json:@cd75911a777e018764c083e272c9b645a6fb8b3bcebe97ad52f729ed54e882aaJH
large€À„Á€  )¦,CÛ@1^Ùƒ:@9h?Àxğ?Aª&ˆºïW@I†¬nõœY@Q;öšœî?JF
tiny€¨À!€  )¼"øŸ*è@1ºˆïD‡å@9KŠLµõñ?AéEíV7•@IÖqüp)”@Ql,ÎX/Öğ?
"""What a person looks at: the HTML report (`html`) and CI-native output (`ci`).

One layer, the surfaces': the values it shows (a `Timeline`, a `Report`, a
`Matrix`) are built below it, so no pipeline or rank imports anything here."""
